// The one way the layers above hang state on a client (the queue engine's, the locks' metrics)
// without the client knowing what it is: made on first use, closed with the client.

/** State a higher layer keeps per client. */
export interface Attachment {
  /** The client closed: stop timers, cancel watches, let go of what it holds. */
  close(): void;
}

/** Names one kind of attachment and makes it for a client on first use. */
export interface AttachmentKey<T extends Attachment, C = unknown> {
  readonly name: string;
  create(client: C): T;
}
