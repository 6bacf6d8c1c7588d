// Narration: numbered steps with timestamps relative to the start (monotonic clock), colors only
// on a terminal, and a --quiet mode that prints nothing but the final summary.

export interface NarratorOptions {
  quiet: boolean;
  color: boolean;
  write?: (text: string) => void;
}

type Paint = (text: string) => string;

export class Narrator {
  readonly t0 = performance.now();
  readonly quiet: boolean;
  private readonly write: (text: string) => void;
  private sceneNo = 0;
  private stepNo = 0;
  private numbered = true;
  readonly bold: Paint;
  readonly dim: Paint;
  readonly red: Paint;
  readonly green: Paint;
  readonly yellow: Paint;
  readonly cyan: Paint;
  private readonly palette: Paint[];
  private readonly who = new Map<string, Paint>();

  constructor(options: NarratorOptions) {
    this.quiet = options.quiet;
    this.write = options.write ?? ((text) => process.stdout.write(text));
    const sgr =
      (open: string, close = '39'): Paint =>
      (text) =>
        options.color ? `\x1b[${open}m${text}\x1b[${close}m` : text;
    this.bold = sgr('1', '22');
    this.dim = sgr('2', '22');
    this.red = sgr('31');
    this.green = sgr('32');
    this.yellow = sgr('33');
    this.cyan = sgr('36');
    this.palette = [sgr('34'), sgr('35'), sgr('33'), sgr('36'), sgr('32'), sgr('94'), sgr('95'), sgr('93'), sgr('96')];
  }

  /** Milliseconds since the demo started. */
  now(): number {
    return performance.now() - this.t0;
  }

  /** A participant's name, in its own color. */
  name(who: string): string {
    let paint = this.who.get(who);
    if (!paint) {
      paint = this.palette[this.who.size % this.palette.length]!;
      this.who.set(who, paint);
    }
    return this.bold(paint(who));
  }

  private stamp(): string {
    return this.dim(`[${(this.now() / 1000).toFixed(2).padStart(6)}s]`);
  }

  private line(text: string): void {
    if (!this.quiet) this.write(`${text}\n`);
  }

  title(text: string, sub: string[]): void {
    this.line(this.bold(text));
    for (const s of sub) this.line(this.dim(s));
    this.line('');
  }

  /** A scene header with a few lines of explanation. */
  scene(title: string, intro: string[], numbered = true): void {
    if (numbered) this.sceneNo++;
    this.numbered = numbered;
    this.stepNo = 0;
    this.line('');
    const head = numbered ? `── ${this.sceneNo} · ${title} ` : `── ${title} `;
    this.line(this.bold(this.cyan(head + '─'.repeat(Math.max(4, 78 - head.length)))));
    for (const s of intro) this.line(this.dim(`   ${s}`));
  }

  /** A numbered step: `[  3.21s] 1.4  text`. */
  step(text: string): void {
    this.stepNo++;
    const no = this.numbered ? `${this.sceneNo}.${this.stepNo}` : '•';
    this.line(`${this.stamp()} ${this.bold(no.padEnd(4))} ${text}`);
  }

  /** An unnumbered detail under the last step. */
  detail(text: string): void {
    this.line(`${' '.repeat(15)}${this.dim('│')} ${text}`);
  }

  /** Text printed even in --quiet mode. */
  always(text = ''): void {
    this.write(`${text}\n`);
  }
}

/** `12 ms`, `2.31 s` */
export function ms(value: number): string {
  return value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(2)} s`;
}

/** `$12.50` */
export function money(cents: number): string {
  return `$${(cents / 100).toFixed(2)}`;
}

/** A lease id or key suffix shortened for reading: `…694d1f2a`. */
export function short(hex: string): string {
  return hex.length > 8 ? `…${hex.slice(-6)}` : hex;
}
