// "Did you mean": the nearest of a few known words to a mistyped one, for the command line's options,
// commands and the installer's subcommands alike.

/** Edit distance (insertions, deletions, substitutions, swaps of neighbours) between two short words. */
function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The known word `word` was most likely meant as: one it begins, else the closest within one edit
 * per three letters (at least one, at most two); undefined when none is that close.
 */
export function nearest(word: string, known: Iterable<string>): string | undefined {
  return [...known]
    .map((k) => ({ k, d: k.startsWith(word) ? 0.5 : distance(word, k) }))
    .filter((c) => c.d <= Math.min(2, Math.max(1, Math.floor(word.length / 3))))
    .sort((x, y) => x.d - y.d)[0]?.k;
}
