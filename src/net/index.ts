export { decode, encode, isPlainData, type PlainData } from './codec.js';
export type { DiagnosticListener, NetDiagnostic, NetDiagnosticKind } from './diagnostics.js';
export { ignoreDiagnostics } from './diagnostics.js';
export {
  type Envelope,
  type EnvelopeType,
  type ErrorResponseEnvelope,
  type MessageBody,
  type OneWayEnvelope,
  type ParsedEnvelope,
  parseEnvelope,
  type RequestEnvelope,
  type RequestId,
  type ResponseEnvelope,
  type SuccessResponseEnvelope,
  sameIdentity,
} from './envelope.js';
export { HANDSHAKE_MAGIC, PROTOCOL_VERSION } from './handshake.js';
export {
  type MessageHandler,
  Messenger,
  type MessengerOptions,
  type PeerEvent,
  type PeerListener,
  type RequestOptions,
  type SendObserver,
} from './messenger.js';
export { parseHostPort, TcpTransport, type TcpTransportOptions } from './tcp-transport.js';
