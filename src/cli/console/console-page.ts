/**
 * The console page and its module, served as they are (no build step): the page maps the bare module names `preact`,
 * `preact/hooks`, `htm` and `uplot` to the files the node serves from those packages (console-http.ts), and the module
 * renders the page with preact and htm (tagged templates, no JSX) and draws the live charts with uPlot. It polls the
 * node it was served from (the cluster view every second, the transactions every two), listens to its event stream,
 * and only ever sends GET requests. Kept as text here so that the built package carries it.
 */

export const CONSOLE_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Basalt console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/vendor/uplot.css">
<script type="importmap">
{ "imports": { "preact": "/console/vendor/preact.js", "preact/hooks": "/console/vendor/hooks.js",
  "htm": "/console/vendor/htm.js", "uplot": "/console/vendor/uplot.js" } }
</script>
<style>
  body { font: 13px/1.4 system-ui, sans-serif; margin: 0; color: #222; background: #f6f6f4; }
  header { display: flex; gap: 1em; align-items: baseline; padding: 0.5em 1em; background: #2b2d31; color: #eee; }
  header h1 { font-size: 18px; margin: 0; }
  main { padding: 0 1em 2em; }
  section { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 0.5em 1em; margin-top: 1em; }
  h2 { font-size: 15px; margin: 0.3em 0; } h3 { font-size: 13px; }
  table { border-collapse: collapse; width: 100%; margin: 0.5em 0; }
  th, td { text-align: left; padding: 2px 6px; border-bottom: 1px solid #eee; vertical-align: top; }
  th { font-weight: 600; color: #555; }
  pre { margin: 0; font-size: 12px; white-space: pre-wrap; }
  .mono { font-family: ui-monospace, monospace; font-size: 11px; }
  .note { color: #666; margin: 0.3em 0; }
  .error { color: #b00; }
  .members { display: flex; gap: 0.6em; flex-wrap: wrap; }
  .member { display: flex; flex-direction: column; min-width: 12em; padding: 0.4em 0.7em; border-radius: 6px; border: 2px solid; }
  .member.ok { border-color: #2a7; background: #eefaf3; }
  .member.warn { border-color: #e90; background: #fff6e6; }
  .member.down { border-color: #d22; background: #fdecec; }
  .badge { font-size: 11px; text-transform: uppercase; }
  .replica.ok { color: #175; } .replica.warn { color: #b60; } .replica.down { color: #c00; text-decoration: line-through; }
  .state.COMMITTED { color: #175; } .state.ABORTED { color: #b00; } .state.PENDING { color: #37c; } .state.FINISHING { color: #b60; }
  .charts { display: flex; gap: 1em; flex-wrap: wrap; }
  form { display: flex; gap: 0.5em; align-items: center; flex-wrap: wrap; }
  input, select, button { font: inherit; }
</style>
</head>
<body>
<div id="app"></div>
<script type="module" src="/console/app.js"></script>
</body>
</html>
`;

export const CONSOLE_APP_JS = `import { h, render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';
import uPlot from 'uplot';

const html = htm.bind(h);
const KEEP_MS = 15 * 60 * 1000;
const CLUSTER_POLL_MS = 1000;
const TX_POLL_MS = 2000;

async function getJson(path) {
  // Same origin: the browser sends the console login (HTTP Basic) it asked for when the page loaded, as it does for
  // the EventSource of /console/api/events.
  const response = await fetch(path, { cache: 'no-store', credentials: 'same-origin' });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.code + ': ' + body.error.message : response.statusText);
  return body;
}

function usePoll(path, everyMs) {
  const [state, setState] = useState({ data: null, error: null });
  useEffect(() => {
    let stopped = false;
    let timer;
    const run = async () => {
      try {
        const data = await getJson(path);
        if (!stopped) setState({ data, error: null });
      } catch (error) {
        if (!stopped) setState((s) => ({ data: s.data, error: String(error.message || error) }));
      }
      if (!stopped) timer = setTimeout(run, everyMs);
    };
    run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [path, everyMs]);
  return state;
}

/** A value as JSON: on one line when short, else indented. */
const pretty = (value) => {
  const line = JSON.stringify(value);
  return line.length <= 80 ? line : JSON.stringify(value, null, 2);
};
const time = (ms) => (ms == null ? '—' : new Date(ms).toISOString().slice(11, 23));
const health = (liveness) => (liveness === 'live' || liveness === 'self' ? 'ok' : liveness === 'suspect' ? 'warn' : 'down');

function Members({ cluster }) {
  return html\`<div class="members">
    \${cluster.members.map(
      (m) => html\`<div class=\${'member ' + health(m.liveness)} data-member=\${m.name} data-liveness=\${m.liveness}>
        <b>\${m.name}</b> <span class="badge">\${m.liveness}</span>
        <small>\${m.address || 'address not recorded'}</small>
        <small>\${m.state}\${m.metaVoter ? ' · metastorage voter' : ''}\${m.dead ? ' · declared dead' : ''}</small>
        <small>\${m.clockOffsetMs == null ? '' : 'clock offset ' + m.clockOffsetMs.toFixed(2) + ' ms'}</small>
      </div>\`,
    )}
  </div>\`;
}

function Partitions({ cluster }) {
  const liveness = new Map(cluster.members.map((m) => [m.name, m.liveness]));
  return html\`<table class="partitions">
    <thead><tr><th>partition</th><th>table</th><th>replicas</th><th>Raft leader</th><th>term</th><th>commit / applied</th>
      <th>leaseholder</th><th>lease window</th><th>moving to</th></tr></thead>
    <tbody>\${cluster.partitions.map(
      (p) => html\`<tr data-partition=\${p.id}>
        <td>\${p.id}</td><td>\${p.table || '—'}</td>
        <td>\${p.replicas.map((r) => html\`<span class=\${'replica ' + health(liveness.get(r))}>\${r}</span> \`)}</td>
        <td class="leader">\${p.leader || '—'}</td><td>\${p.term ?? '—'}</td>
        <td>\${p.commitIndex == null ? 'not hosted here' : p.commitIndex + ' / ' + p.appliedIndex}</td>
        <td class="leaseholder">\${p.leaseholder || '—'}</td>
        <td>\${p.lease ? time(p.lease.startMs) + ' → ' + time(p.lease.expirationMs) + ' (' + p.lease.phase + ')' : '—'}</td>
        <td>\${p.moveTo ? p.moveTo.join(', ') : ''}</td>
      </tr>\`,
    )}</tbody>
  </table>
  \${cluster.truncated ? html\`<p class="note">showing \${cluster.partitions.length} of \${cluster.partitionCount} partitions</p>\` : ''}\`;
}

function Cluster({ poll }) {
  const cluster = poll.data;
  if (cluster == null) return html\`<section><h2>Cluster</h2><p>\${poll.error || 'loading…'}</p></section>\`;
  return html\`<section id="cluster"><h2>Cluster</h2>
    <p class="note">as node <b>\${cluster.node}</b> sees it · metastorage leader \${cluster.metastorageLeader || 'unknown'} ·
      revision \${cluster.metaRevision} · liveness timeout \${cluster.livenessTimeoutMs} ms
      \${poll.error ? html\` · <span class="error">\${poll.error}</span>\` : ''}</p>
    <\${Members} cluster=\${cluster} />
    <\${Partitions} cluster=\${cluster} />
  </section>\`;
}

function Chart({ title, samples, series }) {
  const target = useRef(null);
  const plot = useRef(null);
  useEffect(() => {
    const options = {
      title,
      width: 400,
      height: 170,
      scales: { x: { time: true } },
      series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1.5, spanGaps: true }))],
      axes: [{}, { size: 48 }],
    };
    plot.current = new uPlot(options, [[], ...series.map(() => [])], target.current);
    return () => plot.current.destroy();
  }, []);
  useEffect(() => {
    const data = [samples.map((s) => s.t / 1000), ...series.map((ser) => samples.map((s) => ser.get(s)))];
    if (plot.current) plot.current.setData(data);
  }, [samples]);
  return html\`<div class="chart" ref=\${target}></div>\`;
}

function Live({ samples }) {
  const last = samples[samples.length - 1];
  return html\`<section id="live"><h2>Throughput and latency</h2>
    <p class="note">this node, one sample a second, the last 15 minutes kept in this page\${' · '}\${last
      ? 'last second: ' + last.commits + ' commits, ' + last.aborts + ' aborts'
      : 'waiting for the first sample'}</p>
    <div class="charts">
      <\${Chart} title="per second" samples=\${samples} series=\${[
        { label: 'commits', color: '#2a7', get: (s) => s.commits },
        { label: 'aborts', color: '#d33', get: (s) => s.aborts },
        { label: 'implicit reads', color: '#37c', get: (s) => s.implicitReads },
        { label: 'implicit writes', color: '#a5c', get: (s) => s.implicitWrites },
      ]} />
      <\${Chart} title="latency (ms)" samples=\${samples} series=\${[
        { label: 'commit p50', color: '#2a7', get: (s) => s.commitP50Ms },
        { label: 'commit p99', color: '#175', get: (s) => s.commitP99Ms },
        { label: 'Raft p50', color: '#e90', get: (s) => s.raftCommitP50Ms },
        { label: 'Raft p99', color: '#b50', get: (s) => s.raftCommitP99Ms },
      ]} />
      <\${Chart} title="resolutions per second, by path" samples=\${samples} series=\${[
        { label: 'local', color: '#37c', get: (s) => s.resolution.local },
        { label: 'coordinator', color: '#2a7', get: (s) => s.resolution.coordinator },
        { label: 'commit partition', color: '#e90', get: (s) => s.resolution.commitPartition },
        { label: 'recovery', color: '#d33', get: (s) => s.resolution.recovery },
      ]} />
    </div>
  </section>\`;
}

function TxRow({ tx, live }) {
  return html\`<tr data-tx=\${tx.txId}>
    <td class="mono">\${tx.txId}</td><td class=\${'state ' + tx.state}>\${tx.state}</td>
    <td>\${tx.coordinator || tx.coordinatorId || '—'}</td><td>\${tx.commitTsMs == null ? '—' : time(tx.commitTsMs)}</td>
    <td>\${(tx.ageMs / 1000).toFixed(1)} s</td>
    \${live
      ? html\`<td>\${tx.locksHeld}\${tx.locks.length ? ': ' + tx.locks.map((l) => (l.key ?? '(hidden)') + ' ' + l.mode).join(', ') : ''}</td>
          <td>\${tx.waitsFor.map((w) => (w.key ?? '(hidden)') + ' ← ' + w.holders.join(', ')).join('; ') || '—'}</td>\`
      : ''}
  </tr>\`;
}

function TxTable({ rows, live }) {
  return html\`<table class="txs"><thead><tr><th>tx id</th><th>state</th><th>coordinator</th><th>commitTs</th><th>age</th>
    \${live ? html\`<th>locks held</th><th>waits for</th>\` : ''}</tr></thead>
    <tbody>\${rows.map((tx) => html\`<\${TxRow} tx=\${tx} live=\${live} />\`)}</tbody></table>\`;
}

function Transactions() {
  const [query, setQuery] = useState('');
  const poll = usePoll('/console/api/transactions?limit=20&q=' + encodeURIComponent(query), TX_POLL_MS);
  const t = poll.data;
  return html\`<section id="transactions"><h2>Transactions</h2>
    \${t == null
      ? html\`<p>\${poll.error || 'loading…'}</p>\`
      : html\`<p class="note">tx state map of \${t.node}: <b id="tx-size">\${t.size}</b> entries (at most \${t.entriesMax}) ·
          resolutions by path: \${Object.entries(t.resolution).map(([k, v]) => k + ' ' + v).join(', ')}</p>\`}
    <label>search by tx id <input id="tx-search" value=\${query} placeholder="part of a tx id"
      onInput=\${(e) => setQuery(e.currentTarget.value.trim())} /></label>
    \${t == null ? '' : html\`<\${TxTable} rows=\${t.entries} live=\${false} />
      \${t.truncated ? html\`<p class="note">more entries match: narrow the search</p>\` : ''}
      <h3>Oldest live transactions</h3>
      <p class="note">locks and waits as the lock tables of the partitions \${t.node} is primary of hold them</p>
      \${t.oldestLive.length === 0 ? html\`<p class="note">none</p>\` : html\`<\${TxTable} rows=\${t.oldestLive} live=\${true} />\`}\`}
  </section>\`;
}

function History({ history }) {
  if (!history.hostedHere) {
    return html\`<p class="note">this node holds no replica of \${history.partition}; its replicas: \${history.replicas.join(', ')}</p>\`;
  }
  return html\`<table class="history"><thead><tr><th>version</th><th>commitTs</th><th>value</th></tr></thead>
    <tbody>\${history.versions.map(
      (v) => html\`<tr><td>\${v.kind === 'intent' ? 'intent of ' + v.txId : 'committed'}</td>
        <td>\${v.commitTs == null ? '—' : time(v.commitTsMs) + ' (' + v.commitTs + ')'}</td>
        <td><pre>\${v.deleted ? '(deleted)' : pretty(v.value)}</pre></td></tr>\`,
    )}</tbody></table>
    \${history.truncated ? html\`<p class="note">older versions not shown</p>\` : ''}\`;
}

function Data({ tables }) {
  const [table, setTable] = useState('');
  const [prefix, setPrefix] = useState('');
  const [at, setAt] = useState('');
  const [page, setPage] = useState(null);
  const [history, setHistory] = useState(null);
  const [error, setError] = useState(null);
  const chosen = table || (tables[0] && tables[0].name) || '';
  const load = async (after) => {
    const q = new URLSearchParams({ table: chosen, prefix, limit: '25' });
    if (at) q.set('at', new Date(at).toISOString());
    if (after != null) q.set('after', after);
    try {
      setError(null);
      setPage(await getJson('/console/api/data/scan?' + q));
    } catch (e) {
      setError(String(e.message || e));
    }
  };
  const showHistory = async (key) => {
    try {
      setHistory(await getJson('/console/api/data/history?' + new URLSearchParams({ table: chosen, key, limit: '20' })));
    } catch (e) {
      setError(String(e.message || e));
    }
  };
  return html\`<section id="data"><h2>Data</h2>
    <form onSubmit=\${(e) => { e.preventDefault(); load(null); }}>
      <select id="data-table" value=\${chosen} onChange=\${(e) => setTable(e.currentTarget.value)}>
        \${tables.map((t) => html\`<option value=\${t.name}>\${t.name} (\${t.partitions} partitions × \${t.replicas})</option>\`)}
      </select>
      <input id="data-prefix" placeholder="key prefix" value=\${prefix} onInput=\${(e) => setPrefix(e.currentTarget.value)} />
      <label>read at <input id="data-at" type="datetime-local" step="0.001" value=\${at}
        onInput=\${(e) => setAt(e.currentTarget.value)} /> (empty: now)</label>
      <button id="data-search" type="submit">search</button>
    </form>
    \${error ? html\`<p class="error">\${error}</p>\` : ''}
    \${page == null ? '' : html\`<p class="note">read-only snapshot at \${time(page.readTsMs)} (\${page.readTs})</p>
      <table class="rows"><thead><tr><th>key</th><th>value</th></tr></thead>
        <tbody>\${page.rows.map(
          (r) => html\`<tr data-key=\${r.key}><td><a href="#" onClick=\${(e) => { e.preventDefault(); showHistory(r.key); }}>\${r.key}</a></td>
            <td><pre>\${pretty(r.value)}</pre></td></tr>\`,
        )}</tbody></table>
      \${page.rows.length === 0 ? html\`<p class="note">no keys</p>\` : ''}
      \${page.next != null ? html\`<button id="data-next" onClick=\${() => load(page.next)}>next page</button>\` : ''}\`}
    \${history == null ? '' : html\`<h3>Versions of \${history.key}</h3><\${History} history=\${history} />\`}
  </section>\`;
}

function App() {
  const cluster = usePoll('/console/api/cluster', CLUSTER_POLL_MS);
  const [samples, setSamples] = useState([]);
  useEffect(() => {
    const keep = (list) => list.filter((s) => s.t >= Date.now() - KEEP_MS);
    const events = new EventSource('/console/api/events');
    events.addEventListener('backlog', (e) => setSamples(keep(JSON.parse(e.data))));
    events.onmessage = (e) => setSamples((list) => keep([...list, JSON.parse(e.data)]));
    return () => events.close();
  }, []);
  const c = cluster.data;
  return html\`<header><h1>Basalt</h1>
      <span>\${c ? 'node ' + c.node + ' · version ' + c.version + ' · ' + c.members.length + ' members' : ''}</span></header>
    <main>
      <\${Cluster} poll=\${cluster} />
      <\${Live} samples=\${samples} />
      <\${Transactions} />
      <\${Data} tables=\${c ? c.tables : []} />
    </main>\`;
}

render(html\`<\${App} />\`, document.getElementById('app'));
`;
