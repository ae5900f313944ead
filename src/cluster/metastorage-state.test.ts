import assert from 'node:assert/strict';
import { describe, it, test } from 'node:test';
import fc from 'fast-check';
import { LIMITS } from '../core/limits.js';
import { tablePartitionId } from '../core/partitioning.js';
import { hybridTimestamp } from '../hlc/timestamp.js';
import { encode } from '../net/codec.js';
import {
  decodeMetaCommand,
  decodeMetaView,
  encodeMetaCommand,
  encodeMetaView,
  type MetaCommand,
  MetaState,
  parseMetaView,
  protectedFloor,
} from './metastorage-state.js';

const NODES = ['n1', 'n2', 'n3', 'n4', 'n5'];
let seq = 0;
const GRACE_MS = 31_000;
const create = (name: string, partitions: number, replicas: number, nodes = NODES, atMs = 1_000): MetaCommand => ({
  kind: 'CreateTable',
  requestId: `r${++seq}`,
  name,
  partitions,
  replicas,
  nodes,
  ts: hybridTimestamp(atMs),
});
const drop = (name: string, atMs = 1_000): MetaCommand => ({
  kind: 'DropTable',
  requestId: `r${++seq}`,
  name,
  ts: hybridTimestamp(atMs),
  graceMs: GRACE_MS,
});

function applyAll(commands: readonly MetaCommand[]): MetaState {
  const state = new MetaState();
  commands.forEach((c, i) => {
    state.apply(i + 1, c);
  });
  return state;
}

function loads(state: MetaState): Map<string, number> {
  const load = new Map<string, number>(NODES.map((n) => [n, 0]));
  for (const [, replicas] of state.view().assignments) for (const n of replicas) load.set(n, load.get(n)! + 1);
  return load;
}

test('CreateTable assigns every partition `replicas` distinct nodes, spread evenly (loads differ by at most one)', () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ partitions: fc.integer({ min: 1, max: 40 }), replicas: fc.integer({ min: 1, max: 5 }) }), {
        minLength: 1,
        maxLength: 6,
      }),
      (tables) => {
        const state = applyAll(tables.map((t, i) => create(`t${i}`, t.partitions, t.replicas)));
        for (const table of state.tables()) {
          for (let i = 0; i < table.partitions; i++) {
            const replicas = state.assignment(tablePartitionId(table.id, i))!;
            assert.equal(replicas.length, table.replicas);
            assert.equal(new Set(replicas).size, replicas.length, 'replicas are distinct nodes');
          }
        }
        const values = [...loads(state).values()];
        assert.ok(Math.max(...values) - Math.min(...values) <= 1, `uneven loads ${values.join(',')}`);
      },
    ),
    { seed: 42, numRuns: 200 },
  );
});

test('assignments are deterministic: the same commands give the same state, whatever the node list order', () => {
  const commands = (nodes: string[]): MetaCommand[] => [
    { ...create('x', 8, 3, nodes), requestId: 'rx' },
    { ...create('y', 3, 2), requestId: 'ry' },
  ];
  const a = applyAll(commands(['n3', 'n1', 'n2', 'n5', 'n4']));
  const b = applyAll(commands(NODES));
  assert.deepEqual(a.view(), b.view());
  // Preferred leaders (first replica) rotate over the nodes rather than piling on one.
  const firsts = new Set(Array.from({ length: 5 }, (_, i) => a.assignment(tablePartitionId(1, i))![0]));
  assert.ok(firsts.size >= 3, `first replicas ${[...firsts].join(',')}`);
});

test('CreateTable of an existing name is ALREADY_EXISTS; DropTable of an unknown one is UNKNOWN_TABLE', () => {
  const state = new MetaState();
  const first = state.apply(1, create('accounts', 2, 2));
  assert.equal(first?.status, 'OK');
  const again = state.apply(2, create('accounts', 4, 1));
  assert.equal(again?.status, 'ALREADY_EXISTS');
  assert.equal(state.table('accounts')?.partitions, 2, 'the existing table is unchanged');
  assert.equal(state.apply(3, drop('nope'))?.status, 'UNKNOWN_TABLE');
  assert.equal(state.apply(4, drop('accounts'))?.status, 'OK');
  assert.equal(state.table('accounts'), undefined);
  assert.equal(state.apply(5, drop('accounts'))?.status, 'UNKNOWN_TABLE', 'a retiring table cannot be dropped again');
  const recreated = state.apply(6, create('accounts', 1, 1));
  assert.ok(recreated?.status === 'OK' && recreated.table.id === 2, 'table ids are never reused');
});

test('DropTable retires the table: gone from the tables, its assignments kept until a grace past its deadline', () => {
  const state = new MetaState();
  state.apply(1, create('doomed', 2, 2, NODES, 500));
  state.apply(2, create('kept', 1, 1, NODES, 600));
  const assigned = state.view().assignments;
  assert.equal(state.apply(3, drop('doomed', 1_000))?.status, 'OK');
  assert.deepEqual(
    state.tables().map((t) => t.name),
    ['kept'],
  );
  assert.deepEqual(state.view().assignments, assigned, 'the dropped partitions stay assigned while they retire');
  assert.deepEqual(state.retiring(), [
    {
      table: { name: 'doomed', id: 1, partitions: 2, replicas: 2 },
      dropTs: hybridTimestamp(1_000),
      retireAfter: hybridTimestamp(1_000 + GRACE_MS),
    },
  ]);
  // The name is free at once; the new table gets a new id while the old one still retires.
  const again = state.apply(4, create('doomed', 1, 1, NODES, 2_000));
  assert.ok(again?.status === 'OK' && again.table.id === 3, 'ids are never reused');
  assert.equal(state.retiring().length, 1);
  assert.ok(state.assignment(tablePartitionId(1, 0)) !== undefined);
  // Past retireAfter the state still lists it (nodes destroy it by their clocks); a further grace later it forgets it.
  state.apply(5, create('other', 1, 1, NODES, 1_000 + 2 * GRACE_MS - 1));
  assert.equal(state.retiring().length, 1);
  state.apply(6, create('late', 1, 1, NODES, 1_000 + 2 * GRACE_MS));
  assert.deepEqual(state.retiring(), []);
  assert.equal(state.assignment(tablePartitionId(1, 0)), undefined, 'a forgotten table leaves no assignment');
  assert.equal(state.assignment(tablePartitionId(1, 1)), undefined);
  assert.deepEqual(
    state.tables().map((t) => [t.name, t.id]),
    [
      ['kept', 2],
      ['doomed', 3],
      ['other', 4],
      ['late', 5],
    ],
  );
});

test('a retried command (same request id) is answered with its first result, not applied again', () => {
  const state = new MetaState();
  const c = create('t', 2, 2);
  assert.equal(state.apply(1, c)?.status, 'OK');
  assert.equal(state.apply(2, c)?.status, 'OK', 'the retry learns that its first attempt created the table');
  const d = drop('t');
  assert.equal(state.apply(3, d)?.status, 'OK');
  assert.equal(state.apply(4, d)?.status, 'OK');
  assert.equal(state.resultOf(d.requestId)?.status, 'OK');
});

test('invalid definitions apply as INVALID without changing the tables', () => {
  const state = new MetaState();
  assert.equal(state.apply(1, create('', 1, 1))?.status, 'INVALID');
  assert.equal(state.apply(2, create('t', 0, 1))?.status, 'INVALID');
  assert.equal(state.apply(3, create('t', LIMITS.tablePartitionsMax + 1, 1))?.status, 'INVALID');
  assert.equal(state.apply(4, create('t', 1, 6))?.status, 'INVALID', 'more replicas than nodes');
  assert.deepEqual(state.tables(), []);
  assert.equal(state.revision, 4, 'every entry advances the revision');
  assert.throws(() => state.apply(4, undefined), 'an index applied twice is a bug');
});

test('snapshot and restore round-trip the whole state, and the restored state goes on identically', () => {
  const state = applyAll([create('a', 4, 3), create('b', 2, 1), drop('a'), create('c', 3, 2)]);
  assert.equal(state.view().retiring.length, 1);
  const restored = MetaState.fromView(decodeMetaView(encodeMetaView(state.view())));
  assert.deepEqual(restored.view(), state.view());
  const next = create('d', 5, 3);
  assert.deepEqual(restored.apply(5, next), state.apply(5, next));
  assert.deepEqual(restored.view(), state.view());
  assert.throws(() => decodeMetaView(encodeMetaView({ ...state.view(), tables: [{ name: 1 }] } as never)));
  const badRetiring = { ...state.view(), retiring: [{ table: state.view().retiring[0]!.table, dropTs: 5n }] };
  assert.throws(() => decodeMetaView(encodeMetaView(badRetiring as never)));
});

test('a view written before tables retired (no `retiring`) parses as retiring none', () => {
  const { retiring: _, ...older } = applyAll([create('a', 2, 2)]).view();
  const parsed = decodeMetaView(encode(older));
  assert.deepEqual(parsed.retiring, []);
  assert.deepEqual(parsed.tables, older.tables);
});

test('commands round-trip through the codec; malformed data decodes as a no-op', () => {
  const c = create('t', 3, 2);
  assert.deepEqual(decodeMetaCommand(encodeMetaCommand(c)), c);
  const d = drop('t');
  assert.deepEqual(decodeMetaCommand(encodeMetaCommand(d)), d);
  assert.equal(decodeMetaCommand(new Uint8Array([0xc1])), undefined);
  assert.equal(decodeMetaCommand(encodeMetaCommand({ kind: 'DropTable', name: 't' } as never)), undefined);
  assert.equal(decodeMetaCommand(encode({ ...d, ts: 'soon' })), undefined);
  // A drop written before commands carried timestamps retires at once (timestamp and grace 0).
  assert.deepEqual(decodeMetaCommand(encode({ kind: 'DropTable', requestId: 'old', name: 't' })), {
    kind: 'DropTable',
    requestId: 'old',
    name: 't',
    ts: 0n,
    graceMs: 0,
  });
  assert.equal(decodeMetaCommand(new Uint8Array(0)), undefined);
});

describe('members', () => {
  const ts = hybridTimestamp(2_000);
  const init = (...names: string[]): MetaCommand => ({
    kind: 'InitMembers',
    requestId: `r${++seq}`,
    ts,
    members: names.map((name) => ({ name, address: `${name}.example:7000` })),
  });
  const join = (name: string): MetaCommand => ({
    kind: 'JoinNode',
    requestId: `r${++seq}`,
    ts,
    name,
    address: `${name}.example:7000`,
  });
  const remove = (name: string, dead = false): MetaCommand => ({
    kind: 'RemoveNode',
    requestId: `r${++seq}`,
    ts,
    name,
    dead,
  });
  const report = (partition: string, replicas: readonly string[]): MetaCommand => ({
    kind: 'ReportReplicas',
    requestId: `r${++seq}`,
    ts,
    partition,
    replicas,
  });

  /** Applies commands one by one after those already applied; returns the last result. */
  function run(state: MetaState, ...commands: MetaCommand[]) {
    let result: ReturnType<MetaState['apply']>;
    for (const c of commands) result = state.apply(state.revision + 1, c);
    return result;
  }

  /** Plays every target as reached: each partition's leader reports its target's replicas. */
  function completeMoves(state: MetaState): number {
    const targets = state.view().targets ?? [];
    for (const [p, replicas] of targets) run(state, report(p, [...replicas].reverse()));
    const meta = state.view().metaTarget;
    if (meta !== undefined) run(state, report('meta', meta));
    return targets.length;
  }

  const metaVoters = (state: MetaState) => state.metaVoters().join(',');

  it('a metastorage voter that leaves hands its vote to a member that votes nowhere; forgotten once reported', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3', 'n4', 'n5'));
    assert.equal(metaVoters(state), 'n1,n2,n3', 'the first founders by name');
    assert.equal(state.view().metaTarget, undefined);
    run(state, remove('n2'));
    assert.deepEqual(state.view().metaTarget, ['n1', 'n3', 'n4'], 'n2 is replaced by the first member voting nowhere');
    assert.deepEqual(names(state), ['n1:active', 'n2:leaving', 'n3:active', 'n4:active', 'n5:active']);
    // The group's leader reports each configuration it reaches: a learner promoted, then the leaver removed.
    run(state, report('meta', ['n1', 'n2', 'n3', 'n4']));
    assert.equal(metaVoters(state), 'n1,n2,n3,n4');
    assert.ok(names(state).includes('n2:leaving'), 'still a voter: not forgotten');
    run(state, report('meta', ['n1', 'n3', 'n4']));
    assert.equal(metaVoters(state), 'n1,n3,n4');
    assert.equal(state.view().metaTarget, undefined, 'the target was reached');
    assert.deepEqual(names(state), ['n1:active', 'n3:active', 'n4:active', 'n5:active'], 'n2 is forgotten');
    assert.deepEqual(state.view().removed, ['n2']);
  });

  it('without a member to take its vote, the group shrinks by a minority only; a joining member restores it', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3'));
    run(state, remove('n3'));
    assert.deepEqual(state.view().metaTarget, ['n1', 'n2']);
    run(state, report('meta', ['n1', 'n2']));
    const refused = run(state, remove('n2'));
    assert.ok(
      refused?.status === 'INVALID' && /leave 1 of its 3 voters/.test(refused.message),
      JSON.stringify(refused),
    );
    assert.deepEqual(names(state), ['n1:active', 'n2:active']);
    run(state, join('n4'));
    assert.deepEqual(state.view().metaTarget, ['n1', 'n2', 'n4'], 'a member that joins a short group gets a vote');
    const roundTrip = decodeMetaView(encodeMetaView(state.view()));
    assert.deepEqual(roundTrip.metaTarget, ['n1', 'n2', 'n4'], 'the target survives a snapshot');
    assert.deepEqual(MetaState.fromView(roundTrip).view(), state.view());
    assert.equal(parseMetaView({ ...state.view(), metaTarget: [] }), undefined, 'an empty target is malformed');
    assert.equal(parseMetaView({ ...state.view(), metaTarget: [7] }), undefined, 'a target of non-names is malformed');
  });

  const names = (state: MetaState) => state.members().map((m) => `${m.name}:${m.state}`);

  it('InitMembers records the starting members once; later tables are placed on the active members', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3'));
    const again = run(state, init('n7', 'n8', 'n9'));
    assert.ok(again?.status === 'MEMBERS');
    assert.deepEqual(names(state), ['n1:active', 'n2:active', 'n3:active'], 'the first set stands');
    run(state, create('t', 6, 3, ['n7', 'n8', 'n9']));
    for (const [, replicas] of state.view().assignments) assert.deepEqual([...replicas].sort(), ['n1', 'n2', 'n3']);
  });

  it('two nodes join: targets spread the replicas over five, assignments change only as moves are reported', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3'), create('t', 8, 3));
    const before = state.view().assignments;
    run(state, join('n4'), join('n5'));
    assert.deepEqual(state.view().assignments, before, 'a plan moves nothing by itself');
    const targets = state.view().targets ?? [];
    assert.ok(targets.length > 0);
    for (const [, replicas] of targets) assert.equal(new Set(replicas).size, 3);
    // A move in progress reports each configuration it reaches; the target stays until it is reached.
    const [p, target] = targets[0]!;
    const midway = [...new Set([...before.find(([q]) => q === p)![1], ...target])];
    assert.deepEqual(run(state, report(p, midway)), { status: 'ASSIGNED', partition: p, replicas: midway });
    assert.ok(state.target(p as never) !== undefined, 'not there yet');
    completeMoves(state);
    assert.deepEqual(state.view().targets, []);
    const load = new Map<string, number>();
    for (const [, replicas] of state.view().assignments) for (const n of replicas) load.set(n, (load.get(n) ?? 0) + 1);
    assert.deepEqual([...load.values()].sort(), [4, 5, 5, 5, 5], JSON.stringify([...load]));
    for (const [q, replicas] of state.view().assignments) {
      const planned = targets.find(([t]) => t === q)?.[1];
      if (planned !== undefined) assert.deepEqual(replicas, planned, 'the target order (preferred leader) is kept');
    }
  });

  it('a dead node is replaced: its replicas are planned elsewhere, then it is forgotten and may not join again', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3', 'n4'), create('t', 4, 3));
    const held = state.view().assignments.filter(([, r]) => r.includes('n3')).length;
    assert.ok(held > 0);
    run(state, remove('n3', true));
    assert.deepEqual(names(state), ['n1:active', 'n2:active', 'n3:leaving', 'n4:active']);
    assert.equal(state.members().find((m) => m.name === 'n3')?.dead, true);
    const moved = completeMoves(state);
    assert.equal(moved, held, 'exactly the partitions n3 held move');
    for (const [, replicas] of state.view().assignments) assert.ok(!replicas.includes('n3'));
    const origins = new Map(state.view().origins);
    assert.equal([...origins.values()].filter((r) => r.includes('n3')).length, held, 'origins never change');
    assert.deepEqual(names(state), ['n1:active', 'n2:active', 'n4:active'], 'forgotten once nothing names it');
    assert.deepEqual(state.view().removed, ['n3']);
    const rejoin = run(state, join('n3'));
    assert.ok(rejoin?.status === 'INVALID' && /new name/.test(rejoin.message), JSON.stringify(rejoin));
  });

  it('a removal that would leave fewer nodes than a table has replicas is refused; an unknown node is UNKNOWN_NODE', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3'), create('t', 2, 3));
    const refused = run(state, remove('n2'));
    assert.ok(refused?.status === 'INVALID' && /leave 2 nodes/.test(refused.message), JSON.stringify(refused));
    assert.deepEqual(names(state), ['n1:active', 'n2:active', 'n3:active']);
    assert.deepEqual(run(state, remove('n9')), { status: 'UNKNOWN_NODE', name: 'n9' });
  });

  it('a node that joins again (restart, new address) keeps its replicas and plans nothing', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3'), create('t', 3, 3));
    run(state, { kind: 'JoinNode', requestId: `r${++seq}`, ts, name: 'n2', address: '10.0.0.9:7000' });
    assert.equal(state.members().find((m) => m.name === 'n2')?.address, '10.0.0.9:7000');
    assert.deepEqual(state.view().targets, []);
  });

  it('members, tombstones and targets survive snapshot and restore; an older view reads as none of them', () => {
    const state = new MetaState();
    run(state, init('n1', 'n2', 'n3', 'n4'), create('t', 4, 3), remove('n4'));
    const view = state.view();
    assert.deepEqual(decodeMetaView(encodeMetaView(view)), view);
    assert.deepEqual(MetaState.fromView(view).view(), view);
    const { members: _m, removed: _r, targets: _t, origins: _o, ...older } = view;
    const parsed = decodeMetaView(encodeMetaView(older as never));
    assert.deepEqual([parsed.members, parsed.removed, parsed.targets], [[], [], []]);
    assert.deepEqual(parsed.origins, view.assignments, 'before any move, the assignments were the origins');
    assert.throws(
      () => decodeMetaView(encode({ ...view, members: [{ name: 'n1', state: 'gone' }] })),
      /malformed metastorage snapshot/,
    );
  });

  it('the new commands round-trip through the codec; malformed ones decode as no-ops', () => {
    for (const c of [init('n1', 'n2'), join('n5'), remove('n5', true), report('t1p0', ['n1', 'n2'])]) {
      assert.deepEqual(decodeMetaCommand(encodeMetaCommand(c)), c);
    }
    const bad = [
      { kind: 'JoinNode', requestId: 'x', ts, name: '', address: 'a:1' },
      { kind: 'RemoveNode', requestId: 'x', ts, name: 'n1' },
      { kind: 'ReportReplicas', requestId: 'x', ts, partition: 't1p0', replicas: [1] },
      { kind: 'InitMembers', requestId: 'x', ts, members: [{ address: 'a:1' }] },
    ];
    for (const b of bad)
      assert.equal(
        decodeMetaCommand(encode(b)),
        undefined,
        JSON.stringify(b, (_, v) => String(v)),
      );
  });
});

describe('users', () => {
  const hash = (tag: string) => ({
    algorithm: 'scrypt' as const,
    salt: Buffer.from(`salt-${tag}`).toString('base64'),
    hash: Buffer.from(`hash-${tag}`).toString('base64'),
    cost: 16_384,
    blockSize: 8,
    parallelization: 1,
  });
  const ts = hybridTimestamp(1_000);
  const userCommands = (): MetaCommand[] => [
    { kind: 'CreateUser', requestId: `r${++seq}`, ts, user: { name: 'root', role: 'admin', password: hash('root') } },
    { kind: 'CreateUser', requestId: `r${++seq}`, ts, user: { name: 'tina' } },
    { kind: 'GrantRole', requestId: `r${++seq}`, ts, name: 'tina', role: 'readwrite', table: 'orders' },
    { kind: 'GrantRole', requestId: `r${++seq}`, ts, name: 'tina', role: 'readonly', table: 'accounts' },
    { kind: 'SetPassword', requestId: `r${++seq}`, ts, name: 'tina', password: hash('tina') },
  ];

  it('creates users, sets table roles (sorted) and passwords, and keeps them through a snapshot', () => {
    const state = applyAll(userCommands());
    assert.deepEqual(state.user('tina'), {
      name: 'tina',
      tables: [
        ['accounts', 'readonly'],
        ['orders', 'readwrite'],
      ],
      password: hash('tina'),
    });
    const restored = MetaState.fromView(decodeMetaView(encodeMetaView(state.view())));
    assert.deepEqual(restored.users(), state.users());
    for (const c of userCommands()) assert.deepEqual(decodeMetaCommand(encodeMetaCommand(c)), c);
  });

  it('refuses a taken name, an unknown user, admin on a table, and leaving the cluster without an admin', () => {
    const state = applyAll(userCommands());
    let index = state.revision;
    const apply = (c: Omit<MetaCommand, 'requestId' | 'ts'>) =>
      state.apply(++index, { ...c, requestId: `r${++seq}`, ts } as MetaCommand);
    assert.equal(apply({ kind: 'CreateUser', user: { name: 'tina' } } as MetaCommand)?.status, 'USER_EXISTS');
    assert.equal(apply({ kind: 'RemoveUser', name: 'ghost' } as MetaCommand)?.status, 'UNKNOWN_USER');
    assert.equal(
      apply({ kind: 'GrantRole', name: 'tina', role: 'admin', table: 'orders' } as MetaCommand)?.status,
      'INVALID',
    );
    assert.equal(apply({ kind: 'RemoveUser', name: 'root' } as MetaCommand)?.status, 'INVALID');
    assert.equal(apply({ kind: 'GrantRole', name: 'root', role: 'readonly' } as MetaCommand)?.status, 'INVALID');
    assert.equal(state.user('root')?.role, 'admin');
    // With a second admin, the first may go.
    assert.equal(apply({ kind: 'GrantRole', name: 'tina', role: 'admin' } as MetaCommand)?.status, 'USER');
    assert.equal(apply({ kind: 'RemoveUser', name: 'root' } as MetaCommand)?.status, 'USER');
    assert.deepEqual(
      state.users().map((u) => u.name),
      ['tina'],
    );
  });

  it('a malformed user command or user record decodes as a no-op / an invalid view', () => {
    const bad = { kind: 'CreateUser', requestId: 'x', ts, user: { name: 'u', role: 'superuser' } };
    assert.equal(decodeMetaCommand(encode(bad)), undefined);
    const view = { ...applyAll(userCommands()).view(), users: [{ name: 'u', password: { algorithm: 'md5' } }] };
    assert.equal(parseMetaView(view), undefined);
  });
});

describe('metastorage: protected timestamps', () => {
  const record = (id: string, tsMs: number, expiresMs: number) => ({
    id,
    ts: hybridTimestamp(tsMs),
    expiresAt: hybridTimestamp(expiresMs),
    owner: 'backup',
  });
  const protect = (atMs: number, r: ReturnType<typeof record>, renew = false): MetaCommand => ({
    kind: 'ProtectTimestamp',
    requestId: `r${++seq}`,
    ts: hybridTimestamp(atMs),
    record: r,
    renew,
  });
  const release = (atMs: number, id: string): MetaCommand => ({
    kind: 'ReleaseTimestamp',
    requestId: `r${++seq}`,
    ts: hybridTimestamp(atMs),
    id,
  });
  let index = 0;
  const run = (state: MetaState, command: MetaCommand) => state.apply(++index, command);
  const ids = (state: MetaState) => state.protectedTimestamps().map((p) => p.id);

  it('creates, renews (a later expiry only), releases; a renewal of an unknown id is refused', () => {
    const state = new MetaState();
    assert.equal(run(state, protect(10_000, record('a', 9_000, 130_000)))?.status, 'PROTECTED');
    assert.equal(run(state, protect(10_000, record('a', 9_000, 130_000)))?.status, 'INVALID', 'the id exists');
    const renewed = run(state, protect(40_000, record('a', 9_000, 160_000), true));
    assert.ok(renewed?.status === 'PROTECTED' && renewed.record.expiresAt === hybridTimestamp(160_000));
    const moved = run(state, protect(40_000, record('a', 5_000, 170_000), true));
    assert.ok(moved?.status === 'PROTECTED' && moved.record.ts === hybridTimestamp(9_000), 'a renewal keeps the ts');
    const other = run(state, protect(40_000, { ...record('a', 9_000, 170_000), owner: 'eve' }, true));
    assert.equal(other?.status, 'INVALID', 'only its owner renews it');
    assert.equal(run(state, protect(40_000, record('b', 9_000, 100_000), true))?.status, 'UNKNOWN_PROTECTED_TS');
    assert.deepEqual(ids(state), ['a']);
    assert.equal(run(state, release(50_000, 'a'))?.status, 'PROTECTED');
    assert.deepEqual(ids(state), []);
    assert.equal(run(state, release(50_000, 'a'))?.status, 'UNKNOWN_PROTECTED_TS', 'a second release finds none');
  });

  it('a record lapses at the first command past its expiry; a lapsed one cannot be renewed', () => {
    const state = new MetaState();
    run(state, protect(10_000, record('a', 9_000, 20_000)));
    run(state, protect(10_000, record('b', 9_500, 100_000)));
    run(state, release(20_000, 'none'));
    assert.deepEqual(ids(state), ['a', 'b'], 'not before its expiry');
    run(state, release(20_001, 'none'));
    assert.deepEqual(ids(state), ['b']);
    assert.equal(run(state, protect(20_002, record('a', 9_000, 90_000), true))?.status, 'UNKNOWN_PROTECTED_TS');
  });

  it('lifetimes and the number of records are bounded', () => {
    const state = new MetaState();
    const tooLong = 10_000 + LIMITS.protectedTimestampLifetimeMaxMs + 1;
    assert.equal(run(state, protect(10_000, record('x', 9_000, tooLong)))?.status, 'INVALID');
    assert.equal(run(state, protect(10_000, record('x', 9_000, 10_000)))?.status, 'INVALID', 'expired at once');
    for (let i = 0; i < LIMITS.protectedTimestampsMax; i++) {
      assert.equal(run(state, protect(10_000, record(`p${i}`, 9_000, 60_000)))?.status, 'PROTECTED');
    }
    const over = run(state, protect(10_000, record('over', 9_000, 60_000)));
    assert.ok(over?.status === 'INVALID' && /protected timestamps exist/.test(over.message));
  });

  it('records survive a snapshot; malformed ones are refused at decode', () => {
    const state = new MetaState();
    run(state, protect(10_000, record('a', 9_000, 130_000)));
    run(state, protect(10_000, record('b', 8_000, 130_000)));
    const roundTrip = decodeMetaView(encodeMetaView(state.view()));
    assert.deepEqual(roundTrip.protectedTimestamps, state.view().protectedTimestamps);
    assert.deepEqual(MetaState.fromView(roundTrip).view(), state.view());
    assert.deepEqual(protectedFloor(roundTrip.protectedTimestamps, hybridTimestamp(100_000)), hybridTimestamp(8_000));
    assert.equal(protectedFloor(roundTrip.protectedTimestamps, hybridTimestamp(130_001)), undefined, 'all expired');
    const bad = { ...state.view(), protectedTimestamps: [{ id: 'a', ts: 5, expiresAt: 7n, owner: 'o' }] };
    assert.equal(parseMetaView(bad), undefined);
    const command = { ...protect(1, record('a', 1, 2)), renew: 'yes' };
    assert.equal(decodeMetaCommand(encode(command)), undefined);
    const round = protect(1, record('a', 1, 2));
    assert.deepEqual(decodeMetaCommand(encodeMetaCommand(round)), round);
  });
});
