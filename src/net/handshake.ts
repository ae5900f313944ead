/**
 * The connection handshake. Both ends send a hello as their first frame, `{ magic, protocolVersion, name, id }`, and
 * treat the connection as open only once the other end's hello arrived and checked out. The hello is how a node
 * learns a peer's ephemeral id (DESIGN §2 node identity): a restarted peer says hello with a new id.
 */
import type { NodeId, NodeName } from '../core/ids.js';
import type { PeerIdentity } from '../env/transport.js';
import { nameProblem } from './envelope.js';

export const HANDSHAKE_MAGIC = 'basalt';
export const PROTOCOL_VERSION = 1;

export interface Hello {
  readonly magic: string;
  readonly protocolVersion: number;
  readonly name: NodeName;
  readonly id: NodeId;
}

export function hello(self: PeerIdentity): Hello {
  return { magic: HANDSHAKE_MAGIC, protocolVersion: PROTOCOL_VERSION, name: self.name, id: self.id };
}

export type ParsedHello =
  | { readonly ok: true; readonly peer: PeerIdentity }
  | { readonly ok: false; readonly reason: string };

export function parseHello(value: unknown): ParsedHello {
  const reason = helloProblem(value);
  if (reason !== undefined) return { ok: false, reason };
  const { name, id } = value as Hello;
  return { ok: true, peer: { name, id } };
}

function helloProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'hello is not an object';
  const fields = value as Readonly<Record<string, unknown>>;
  if (fields['magic'] !== HANDSHAKE_MAGIC) return 'hello has the wrong magic';
  if (fields['protocolVersion'] !== PROTOCOL_VERSION) {
    return `protocol version ${String(fields['protocolVersion'])}, expected ${PROTOCOL_VERSION}`;
  }
  if (Object.keys(fields).length !== 4) return 'hello must have exactly magic, protocolVersion, name and id';
  return nameProblem(fields['name'], 'hello.name') ?? nameProblem(fields['id'], 'hello.id');
}
