// The console's page, script and style, served from the package (no CDN, no build step for
// users). The script builds every element with textContent: no field is ever parsed as HTML.

export const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>partner-events console</title>
<link rel="stylesheet" href="/console/app.css">
<script src="/console/app.js" defer></script>
</head>
<body>
<header>
  <h1>partner-events</h1>
  <span id="source" class="muted"></span>
  <span id="mode" class="badge"></span>
</header>
<main>
<section id="live">
  <h2>Live <span class="muted">(last 15 minutes)</span></h2>
  <div class="cards">
    <div class="card"><div class="label">handled</div><div class="value" id="total-handled">0</div></div>
    <div class="card"><div class="label">duplicates</div><div class="value" id="total-duplicate">0</div></div>
    <div class="card"><div class="label">retried</div><div class="value" id="total-retried">0</div></div>
    <div class="card"><div class="label">dead-lettered</div><div class="value" id="total-dead">0</div></div>
    <div class="card"><div class="label">in flight</div><div class="value" id="in-flight">0</div></div>
    <div class="card"><div class="label">event age</div><div class="value" id="event-age">–</div></div>
    <div class="card"><div class="label">handler p50 / p95</div><div class="value" id="latency">–</div></div>
    <div class="card"><div class="label">dedupe store</div><div class="value" id="dedupe">–</div></div>
  </div>
  <canvas id="chart" width="900" height="180" aria-label="events per second by outcome"></canvas>
  <div id="legend" class="legend"></div>
  <div class="columns">
    <div><h3>Rejections by code</h3><table id="rejections"><tbody></tbody></table></div>
    <div><h3>Signing keys</h3><table id="keys"><tbody></tbody></table></div>
    <div><h3>Readiness</h3><table id="readiness"><tbody></tbody></table></div>
  </div>
</section>
<section id="letters">
  <h2>Dead letters <span class="muted" id="letter-file"></span></h2>
  <form id="filter">
    <label>code <input name="code" placeholder="HANDLER_FAILED"></label>
    <label>event type <input name="type" placeholder="daily.data.*"></label>
    <label>event id <input name="event_id"></label>
    <label>since <input name="since" placeholder="2026-11-25T00:00:00Z"></label>
    <label>until <input name="until"></label>
    <button type="submit">Filter</button>
  </form>
  <div class="pager"><button id="newer" type="button">&larr; newer</button><span id="page-info"></span><button id="older" type="button">older &rarr;</button></div>
  <table id="letter-table">
    <thead><tr><th><input type="checkbox" id="select-page" aria-label="select this page"></th><th>dead-lettered at</th><th>code</th><th>event type</th><th>event id</th><th>attempts</th><th>reason</th></tr></thead>
    <tbody></tbody>
  </table>
  <div id="detail" hidden>
    <h3>Letter <span id="detail-n"></span></h3>
    <dl id="detail-fields"></dl>
    <p><button id="show-body" type="button">Show message (health data)</button></p>
    <pre id="body" hidden></pre>
  </div>
</section>
<section id="replay">
  <h2>Replay</h2>
  <p id="replay-target" class="muted"></p>
  <label id="token-label">console token <input id="token" type="password" autocomplete="off"></label>
  <p>
    <button id="dry-run" type="button">Dry run selected</button>
    <button id="dry-run-filter" type="button">Dry run all matching the filter</button>
    <button id="confirm" type="button" disabled>Replay</button>
  </p>
  <p id="replay-status" role="status"></p>
  <table id="replay-report"><tbody></tbody></table>
</section>
</main>
</body>
</html>
`;

export const CONSOLE_CSS = `
:root { --fg: #1d2330; --muted: #6b7385; --bg: #fff; --line: #e3e6ec; --handled: #2e7d32; --duplicate: #1565c0; --retried: #ef6c00; --dead: #c62828; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
header { display: flex; gap: 1rem; align-items: baseline; padding: .75rem 1.25rem; border-bottom: 1px solid var(--line); }
h1 { font-size: 1.1rem; margin: 0; }
h2 { font-size: 1rem; margin: 1.25rem 0 .5rem; }
h3 { font-size: .9rem; margin: .75rem 0 .25rem; }
main { padding: 0 1.25rem 2rem; max-width: 1200px; }
.muted { color: var(--muted); font-weight: normal; }
.badge { font-size: .8rem; padding: .1rem .5rem; border-radius: .75rem; background: #eef1f6; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(130px, 1fr)); gap: .5rem; }
.card { border: 1px solid var(--line); border-radius: .4rem; padding: .4rem .6rem; }
.card .label { color: var(--muted); font-size: .8rem; }
.card .value { font-size: 1.2rem; font-variant-numeric: tabular-nums; }
canvas { width: 100%; max-width: 900px; height: 180px; border: 1px solid var(--line); margin-top: .75rem; }
.legend span { margin-right: 1rem; font-size: .8rem; }
.legend i { display: inline-block; width: .7rem; height: .7rem; margin-right: .25rem; vertical-align: middle; }
.columns { display: grid; grid-template-columns: repeat(auto-fit, minmax(240px, 1fr)); gap: 1rem; }
table { border-collapse: collapse; width: 100%; }
td, th { text-align: left; padding: .25rem .4rem; border-bottom: 1px solid var(--line); vertical-align: top; }
#letter-table tbody tr { cursor: pointer; }
#letter-table tbody tr:hover { background: #f6f8fb; }
td.reason { max-width: 28rem; overflow-wrap: anywhere; }
td.id { font-family: ui-monospace, monospace; font-size: .85rem; overflow-wrap: anywhere; }
form { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; }
label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
input { font: inherit; padding: .2rem .35rem; }
.pager { margin: .5rem 0; display: flex; gap: .75rem; align-items: center; }
#detail { border: 1px solid var(--line); border-radius: .4rem; padding: .5rem .75rem; margin-top: .75rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .2rem .75rem; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
pre { background: #f6f8fb; padding: .5rem; overflow: auto; max-height: 20rem; }
.ok { color: var(--handled); }
.bad { color: var(--dead); }
`;

export const CONSOLE_JS = `'use strict';
(() => {
  const COLORS = { handled: '#2e7d32', duplicate: '#1565c0', retried: '#ef6c00', dead: '#c62828' };
  const $ = (id) => document.getElementById(id);
  const state = { page: 0, size: 50, filter: {}, generation: '', selected: new Set(), lastJob: null, live: null };

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }
  function setText(id, text) { $(id).textContent = text === undefined || text === null ? '–' : String(text); }
  function rows(tbody, entries) {
    tbody.replaceChildren(...entries.map((cells) => {
      const tr = el('tr');
      for (const cell of cells) tr.append(cell instanceof Node ? wrap(cell) : el('td', cell));
      return tr;
    }));
  }
  function wrap(node) { const td = el('td'); td.append(node); return td; }
  function headers(json) {
    const token = $('token').value;
    const h = json ? { 'content-type': 'application/json' } : {};
    if (token) h.authorization = 'Bearer ' + token;
    return h;
  }

  // Live view ------------------------------------------------------------------------------
  function showLive(live) {
    state.live = live;
    setText('source', live.source);
    const mode = live.writable ? (live.tokenRequired ? 'replay needs the token' : 'loopback: replay allowed') : 'read-only (no token set off loopback)';
    setText('mode', mode);
    $('token-label').hidden = !live.tokenRequired;
    setText('letter-file', live.deadLetterFile);
    const s = live.stats;
    for (const k of ['handled', 'duplicate', 'retried', 'dead']) setText('total-' + k, s.totals[k]);
    setText('in-flight', live.inFlight);
    setText('event-age', s.lastEventAgeSeconds === undefined ? undefined : s.lastEventAgeSeconds.toFixed(1) + ' s');
    const l = s.handlerLatencyMs;
    setText('latency', l.p50 === undefined ? undefined : l.p50.toFixed(1) + ' / ' + l.p95.toFixed(1) + ' ms');
    setText('dedupe', live.dedupeAvailable ? 'available' : 'UNAVAILABLE');
    rows($('rejections').tBodies[0], Object.entries(s.rejectedByCode).sort((a, b) => b[1] - a[1]));
    rows($('keys').tBodies[0], live.keyIds.map((id) => [id, (s.verifiedByKeyId[id] || 0) + ' verified', id === s.lastKeyId ? 'latest' : '']));
    rows($('readiness').tBodies[0], Object.entries(live.readiness).map(([name, c]) => [name, el('span', c.ok ? 'ok' : 'not ready', c.ok ? 'ok' : 'bad'), c.detail || '']));
    setText('replay-target', live.replay.to ? 'Replays send to ' + live.replay.to + ' through partner-events replay (verified again, done events skipped).' : 'Replay is not available here: ' + live.replay.unavailable);
    drawChart(s);
  }

  function drawChart(s) {
    const canvas = $('chart');
    const ctx = canvas.getContext('2d');
    const w = canvas.width, h = canvas.height, pad = 20;
    ctx.clearRect(0, 0, w, h);
    let max = 1;
    for (const k of Object.keys(COLORS)) for (const v of s.series[k]) if (v > max) max = v;
    ctx.fillStyle = '#6b7385';
    ctx.font = '11px system-ui';
    ctx.fillText(max + '/s', 2, 12);
    ctx.fillText('-15 min', 2, h - 4);
    ctx.fillText('now', w - 24, h - 4);
    const n = s.series.handled.length;
    for (const [k, color] of Object.entries(COLORS)) {
      ctx.strokeStyle = color;
      ctx.beginPath();
      s.series[k].forEach((v, i) => {
        const x = pad + (i / (n - 1)) * (w - 2 * pad);
        const y = h - pad - (v / max) * (h - 2 * pad);
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
    }
  }

  function legend() {
    $('legend').replaceChildren(...Object.entries(COLORS).map(([k, color]) => {
      const span = el('span');
      const swatch = el('i');
      swatch.style.background = color;
      span.append(swatch, document.createTextNode(k));
      return span;
    }));
  }

  function follow() {
    const events = new EventSource('/console/api/stream');
    events.onmessage = (message) => showLive(JSON.parse(message.data));
  }

  // Dead letters ----------------------------------------------------------------------------
  function query() {
    const q = new URLSearchParams({ page: String(state.page), size: String(state.size) });
    for (const [k, v] of Object.entries(state.filter)) if (v) q.set(k, v);
    return q;
  }

  async function loadLetters() {
    const page = await (await fetch('/console/api/letters?' + query())).json();
    if (page.generation !== state.generation) state.selected.clear();
    state.generation = page.generation;
    const from = page.matching === 0 ? 0 : state.page * state.size + 1;
    setText('page-info', from + '–' + (state.page * state.size + page.letters.length) + ' of ' + page.matching + (page.matching !== page.total ? ' (of ' + page.total + ')' : ''));
    $('newer').disabled = state.page === 0;
    $('older').disabled = (state.page + 1) * state.size >= page.matching;
    const tbody = $('letter-table').tBodies[0];
    tbody.replaceChildren(...page.letters.map((letter) => {
      const tr = el('tr');
      tr.dataset.n = String(letter.n);
      const box = el('input');
      box.type = 'checkbox';
      box.checked = state.selected.has(letter.n);
      box.setAttribute('aria-label', 'select letter ' + letter.n);
      box.addEventListener('click', (event) => {
        event.stopPropagation();
        if (box.checked) state.selected.add(letter.n); else state.selected.delete(letter.n);
      });
      const id = letter.eventId || (letter.claimedEventId ? letter.claimedEventId + ' (claimed, unsigned)' : '');
      const type = letter.eventType || (letter.claimedEventType ? letter.claimedEventType + ' (claimed)' : '');
      tr.append(wrap(box), el('td', letter.at), el('td', letter.code), el('td', type), el('td', id, 'id'), el('td', letter.attempts), el('td', letter.reason, 'reason'));
      tr.addEventListener('click', () => showDetail(letter.n));
      return tr;
    }));
  }

  async function showDetail(n) {
    const response = await fetch('/console/api/letters/' + n + '?generation=' + encodeURIComponent(state.generation));
    const d = await response.json();
    if (!response.ok) { setText('replay-status', d.error); return; }
    $('detail').hidden = false;
    $('body').hidden = true;
    $('body').textContent = '';
    setText('detail-n', n);
    $('show-body').dataset.n = String(n);
    const v = d.verification;
    const fields = [
      ['code', d.code], ['reason', d.reason], ['attempts', d.attempts], ['dead-lettered at', d.deadLetteredAt],
      ['source', d.source], ['message id', d.messageId], ['enqueued at', d.enqueuedAt],
      ['event id', d.eventId], ['event type', d.eventType], ['message size', d.rawBytes + ' bytes'],
      ['verification now', v.ok ? 'ok (key ' + v.keyId + ')' : v.code + ': ' + v.reason],
    ];
    for (const [k, val] of Object.entries(d.metadata)) fields.push(['metadata.' + k, val]);
    $('detail-fields').replaceChildren(...fields.flatMap(([k, val]) => {
      const dd = el('dd', val === null || val === undefined ? '–' : val);
      if (k === 'verification now') { dd.id = 'verification'; dd.className = v.ok ? 'ok' : 'bad'; }
      return [el('dt', k), dd];
    }));
  }

  async function showBody() {
    const n = $('show-body').dataset.n;
    const response = await fetch('/console/api/letters/' + n + '/raw?generation=' + encodeURIComponent(state.generation), { headers: headers(false) });
    const d = await response.json();
    $('body').hidden = false;
    $('body').textContent = response.ok ? d.message : d.error;
  }

  // Replay ----------------------------------------------------------------------------------
  async function startReplay(selection, dryRun) {
    const response = await fetch('/console/api/replays', {
      method: 'POST',
      headers: headers(true),
      body: JSON.stringify({ ...selection, generation: state.generation, dryRun }),
    });
    const answer = await response.json();
    if (!response.ok) { setText('replay-status', 'refused: ' + answer.error); return; }
    state.lastJob = { id: answer.id, selection, dryRun };
    $('confirm').disabled = true;
    setText('replay-status', (dryRun ? 'dry run' : 'replay') + ' of ' + answer.letters + ' letters started');
    poll(answer.id);
  }

  async function poll(id) {
    const job = await (await fetch('/console/api/replays/' + id)).json();
    const counts = {};
    for (const r of job.records) counts[r.action || r.outcome] = (counts[r.action || r.outcome] || 0) + 1;
    const progress = Object.entries(counts).map(([k, v]) => k + ' ' + v).join(', ');
    if (job.state === 'running') {
      setText('replay-status', (job.dryRun ? 'dry run' : 'replay') + ' running: ' + job.records.length + ' of ' + job.letters + (progress ? ' (' + progress + ')' : ''));
      setTimeout(() => poll(id), 300);
      return;
    }
    if (job.state === 'failed') { setText('replay-status', 'failed: ' + job.error); return; }
    const s = job.summary;
    setText('replay-status', (job.dryRun ? 'Dry run done: nothing was changed. ' : 'Replay done. ') + progress + (job.dryRun ? ' — press Replay to send these.' : '') + (s.dead_letter_file ? ' Still failing: ' + s.dead_letter_file : ''));
    rows($('replay-report').tBodies[0], job.records.map((r) => [r.line, r.event_type || '', r.event_id || '', r.action || r.outcome, r.code || r.recorded_code || '']));
    $('confirm').disabled = !job.dryRun;
    if (!job.dryRun) loadLetters();
  }

  document.addEventListener('DOMContentLoaded', () => {
    legend();
    fetch('/console/api/live').then((r) => r.json()).then(showLive);
    follow();
    loadLetters();
    $('filter').addEventListener('submit', (event) => {
      event.preventDefault();
      state.filter = Object.fromEntries(new FormData($('filter')));
      state.page = 0;
      loadLetters();
    });
    $('newer').addEventListener('click', () => { state.page = Math.max(0, state.page - 1); loadLetters(); });
    $('older').addEventListener('click', () => { state.page += 1; loadLetters(); });
    $('select-page').addEventListener('change', (event) => {
      for (const tr of $('letter-table').tBodies[0].rows) {
        const n = Number(tr.dataset.n);
        if (event.target.checked) state.selected.add(n); else state.selected.delete(n);
        tr.querySelector('input').checked = event.target.checked;
      }
    });
    $('show-body').addEventListener('click', showBody);
    $('dry-run').addEventListener('click', () => startReplay({ letters: [...state.selected] }, true));
    $('dry-run-filter').addEventListener('click', () => startReplay({ filter: state.filter }, true));
    $('confirm').addEventListener('click', () => {
      if (state.lastJob && state.lastJob.dryRun) startReplay(state.lastJob.selection, false);
    });
  });
})();
`;
