/**
 * Diagnostics: what the net layer observed but could not hand to anyone as an error, because nobody asked: a
 * malformed frame from a peer, a failed handshake, a dropped queue entry, a late response. They are reported to an
 * injected callback (the node wires it to its logger; tests collect them) and never thrown into the process.
 */
import type { ErrorCode } from '../core/errors.js';

export type NetDiagnosticKind =
  /** A frame that did not decode, or decoded into something that is not a valid envelope; its connection is closed. */
  | 'malformed-frame'
  /** A length prefix above the frame limit; its connection is closed. */
  | 'frame-too-large'
  /** A handshake that was wrong, timed out, or named an unexpected peer; the connection is closed. */
  | 'handshake-failed'
  /** A peer's hello listed other cluster members than this node runs with; the connection is refused (handshake.ts). */
  | 'member-mismatch'
  /**
   * A peer whose TLS certificate does not name the member its hello claims (peer-tls.ts); the connection is refused.
   * Reported once per peer and certificate names, as a member mismatch is.
   */
  | 'peer-cert-mismatch'
  /** An inbound TLS handshake that failed (a certificate of another CA, none, or out of date); once per reason. */
  | 'tls-refused'
  /**
   * A client login refused (a wrong password, an unknown user, a client certificate that failed, too many failures):
   * the message names the user and the reason, never the password.
   */
  | 'auth-refused'
  /** A connection ended by an error (refused, reset, too slow to drain its write buffer). */
  | 'connection-error'
  /** A payload dropped: the peer's queue was full, the peer has no known address, or the transport is closed. */
  | 'payload-dropped'
  /** An envelope whose sender does not match the connection it arrived on. */
  | 'sender-mismatch'
  /** A response for a request that is no longer pending (it timed out, was cancelled, or never existed). */
  | 'unexpected-response'
  /**
   * A message whose body is not well-formed for its kind, or of a kind this node has no check for (messenger.ts
   * `bodyChecks`): refused whole before any handler ran; a request is answered with the code.
   */
  | 'malformed-message'
  /** A one-way message of a kind without a handler. */
  | 'unknown-message'
  /** Envelopes refused because their timestamp was beyond the clock skew bound (rule 8); rate-limited per peer. */
  | 'clock-skew'
  /** A handler or listener threw something other than a BasaltError (a bug on this node). */
  | 'handler-failed';

export interface NetDiagnostic {
  readonly kind: NetDiagnosticKind;
  readonly message: string;
  /** The peer concerned: a node name when known, else a remote address. */
  readonly peer?: string | undefined;
  readonly code?: ErrorCode | undefined;
}

export type DiagnosticListener = (diagnostic: NetDiagnostic) => void;

export const ignoreDiagnostics: DiagnosticListener = () => {};
