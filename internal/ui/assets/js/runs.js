// runs.js: the runs list with its filters, and a run's live view.
import {h, replace, table, badge, time, duration, json, errorBox} from './dom.js';
import * as api from './api.js';
import * as events from './events.js';

const PHASES = ['Pending', 'Running', 'AwaitingApproval', 'Succeeded', 'Failed', 'Cancelled', 'Rejected'];
const TERMINAL = new Set(['Succeeded', 'Failed', 'Cancelled', 'Rejected']);
const STATUSES = ['ok', 'changed', 'failed', 'skipped', 'unreachable'];
// A check run's targets say what an apply would do instead of changing.
const CHECK_STATUSES = ['ok', 'would_change', 'unknown', 'failed', 'skipped', 'unreachable'];

function runLink(r) {
  return h('a', {href: '#/runs/' + encodeURIComponent(r.id), class: 'mono'}, r.id);
}

function runDuration(r) {
  if (!r.started_at) return '';
  const end = r.finished_at ? new Date(r.finished_at) : new Date();
  return duration(end - new Date(r.started_at));
}

export async function runsPage(main, {params, signal, navigate}) {
  const phase = params.get('phase') || '';
  const name = params.get('name') || '';
  const phaseSel = h('select', {id: 'filter-phase', name: 'phase'},
    h('option', {value: ''}, 'any phase'), PHASES.map(p => h('option', {value: p, selected: p === phase}, p)));
  const nameIn = h('input', {id: 'filter-name', name: 'name', type: 'search', value: name, placeholder: 'scenario name contains…'});
  const filters = h('form', {class: 'filters', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    navigate('#/runs' + api.query({phase: phaseSel.value, name: nameIn.value.trim()}));
  }}, h('label', {for: 'filter-phase'}, 'Phase'), phaseSel, h('label', {for: 'filter-name'}, 'Name'), nameIn,
  h('button', {type: 'submit'}, 'Filter'));
  phaseSel.addEventListener('change', () => filters.requestSubmit());

  const list = h('div', {id: 'runs'});
  const more = h('div', {class: 'more'});
  replace(main, h('h1', {}, 'Runs'), filters, list, more);
  let items = [];
  let pages = 0;
  const load = async (after, again) => {
    const page = await api.call('GET', '/v1/runs' + api.query({limit: 50, phase, name, after}));
    if (signal.aborted) return;
    items = again ? page.items : items.concat(page.items);
    if (!again) pages++;
    replace(list, table([
      {label: 'Run', cell: runLink},
      {label: 'Scenario', cell: r => r.name || '—'},
      {label: 'Phase', cell: r => [badge(r.phase), r.mode === 'check' ? [' ', h('span', {class: 'badge st-check'}, 'check')] : null]},
      {label: 'Created', cell: r => time(r.created_at)},
      {label: 'Duration', cell: runDuration},
      {label: 'By', cell: r => h('span', {class: 'mono'}, r.created_by)},
    ], items, {empty: phase || name ? 'No run matches these filters.' : 'No run yet: start one with soulctl run.', row: r => ({dataset: {run: r.id}})}));
    replace(more, page.next ? h('button', {type: 'button', onclick: () => load(page.next)}, 'Load more') : null);
  };
  await load('');
  // While the first page is all that is shown, it follows new runs and
  // phase changes every few seconds.
  const poll = setInterval(() => {
    if (pages === 1 && !document.hidden) load('', true).catch(() => {});
  }, 4000);
  signal.addEventListener('abort', () => clearInterval(poll));
}

// runState is what the live view shows, built from events while the run
// goes on and from GET /v1/runs/{id} once it has finished.
class RunState {
  constructor(run) {
    this.run = run;
    this.phase = run.phase;
    this.steps = []; // {name, module, status, targets: Map sid -> target}
    this.sids = [];
    this.logs = [];
    this.error = run.error || null;
  }

  static fromRun(run) {
    const s = new RunState(run);
    for (const st of run.steps || []) {
      const step = s.step(st.name, st.module);
      step.status = st.status;
      for (const t of st.targets || []) {
        s.target(step, t.sid, {status: t.status, changed: t.changed, attempts: t.attempts, durationMs: t.duration_ms, error: t.error || null});
      }
    }
    return s;
  }

  step(name, module) {
    let st = this.steps.find(x => x.name === name);
    if (!st) {
      st = {name, module: module || '', status: 'running', targets: new Map()};
      this.steps.push(st);
    }
    if (module) st.module = module;
    return st;
  }

  target(step, sid, fields) {
    if (!this.sids.includes(sid)) this.sids.push(sid);
    const t = step.targets.get(sid) || {status: 'running'};
    Object.assign(t, fields);
    step.targets.set(sid, t);
    return t;
  }

  apply(u) {
    switch (u.type) {
      case events.PHASE:
        this.phase = u.phase || this.phase;
        break;
      case events.STEP_STARTED: {
        const st = this.step(u.step, u.module);
        st.status = 'running';
        for (const sid of u.targets) this.target(st, sid, {status: 'running', startedAt: u.at});
        break;
      }
      case events.TARGET: {
        const st = this.step(u.step);
        this.target(st, u.sid, {status: u.status, changed: u.changed, attempts: u.attempts, durationMs: u.durationMs, error: u.error});
        break;
      }
      case events.STEP_FINISHED:
        this.step(u.step).status = u.status;
        break;
      case events.LOG:
        this.logs.push(u);
        if (this.logs.length > 500) this.logs.shift();
        break;
      case events.FINISHED:
        this.phase = u.phase || this.phase;
        this.error = u.error;
        break;
    }
  }
}

function cell(t) {
  if (!t) return h('td', {class: 'cell none'}, '—');
  const running = t.status === 'running';
  const clock = h('span', {class: 'elapsed', dataset: running && t.startedAt ? {started: t.startedAt.getTime()} : {}},
    running ? (t.startedAt ? duration(Date.now() - t.startedAt.getTime()) : '') : duration(t.durationMs));
  return h('td', {class: 'cell', 'data-status': t.status},
    badge(t.status), ' ', clock,
    t.attempts > 1 ? h('span', {class: 'muted'}, ' ×' + t.attempts) : null,
    t.error ? h('div', {class: 'cell-error'}, (t.error.code ? t.error.code + ': ' : '') + t.error.message) : null);
}

function grid(state) {
  if (state.steps.length === 0) return h('p', {class: 'muted'}, 'No step has started yet.');
  return h('div', {class: 'grid-wrap'}, h('table', {class: 'grid', id: 'grid'},
    h('thead', {}, h('tr', {}, h('th', {scope: 'col'}, 'Step'), state.sids.map(sid => h('th', {scope: 'col', class: 'mono'}, sid)))),
    h('tbody', {}, state.steps.map(st => h('tr', {dataset: {step: st.name}},
      h('th', {scope: 'row'}, h('div', {}, st.name, ' ', badge(st.status)), h('div', {class: 'muted mono'}, st.module)),
      state.sids.map(sid => {
        const td = cell(st.targets.get(sid));
        td.dataset.sid = sid;
        return td;
      }))))));
}

// recap counts each host's results, as a play recap does.
function recap(state) {
  const statuses = state.run.mode === 'check' ? CHECK_STATUSES : STATUSES;
  const rows = state.sids.map(sid => {
    const n = Object.fromEntries(statuses.map(s => [s, 0]));
    for (const st of state.steps) {
      const t = st.targets.get(sid);
      if (t && n[t.status] !== undefined) n[t.status]++;
    }
    return {sid, n};
  });
  return table([{label: 'Host', cell: r => h('span', {class: 'mono'}, r.sid)},
    ...statuses.map(s => ({label: s.replace('_', ' '), cell: r => h('span', {class: r.n[s] ? 'count st-' + s : 'count zero'}, String(r.n[s]))}))],
  rows, {class: 'recap', empty: 'No host yet.'});
}

// changeSign marks a change as terraform plan does: + made, - removed,
// ~ changed in place.
function changeSign(c) {
  if (['create', 'install', 'add', 'start', 'pull', 'run'].includes(c.action)) return '+';
  if (['delete', 'remove', 'purge', 'destroy'].includes(c.action)) return '-';
  return '~';
}

// plan is a finished check run's answer, per step and host: what an apply
// would change (files with their diffs), and what the check cannot know
// and why.
function plan(run) {
  const c = run.check || {would_change: 0, unknown: 0, unchanged: 0, failed: 0};
  const items = [];
  for (const st of run.steps || []) {
    if (st.status === 'unknown' && (st.targets || []).length === 0) {
      items.push(h('li', {class: 'plan-step', dataset: {step: st.name, status: 'unknown'}}, badge('unknown'), ' ', h('strong', {}, st.name),
        h('span', {class: 'muted'}, ' — its hosts come from an earlier step\'s result, known only after an apply')));
      continue;
    }
    for (const t of st.targets || []) {
      if (t.status !== 'would_change' && t.status !== 'unknown') continue;
      items.push(h('li', {class: 'plan-step', dataset: {step: st.name, sid: t.sid, status: t.status}},
        badge(t.status), ' ', h('strong', {}, st.name), ' on ', h('span', {class: 'mono'}, t.sid), ' ', h('span', {class: 'muted mono'}, st.module),
        t.unknown ? h('div', {class: 'muted plan-unknown'}, t.unknown) : null,
        (t.changes || []).length ? h('ul', {class: 'changes'}, t.changes.map(ch => h('li', {class: 'mono', dataset: {kind: ch.kind, action: ch.action}},
          changeSign(ch) + ' ' + ch.kind + ' ' + ch.action + ' ' + ch.name,
          ch.before || ch.after ? ' (' + (ch.before || 'none') + ' → ' + (ch.after || 'none') + ')' : '',
          ch.note ? h('span', {class: 'muted'}, ' — ' + ch.note) : null,
          ch.diff ? h('pre', {class: 'diff'}, ch.diff.split('\n').map(l => h('span', {class: l.startsWith('+') && !l.startsWith('+++') ? 'add' : l.startsWith('-') && !l.startsWith('---') ? 'del' : ''}, l + '\n'))) : null))) : null));
    }
  }
  return h('div', {id: 'plan'},
    h('p', {}, 'Nothing was changed. An apply would change ', h('strong', {id: 'plan-would'}, String(c.would_change)),
      ' target(s); ', h('strong', {id: 'plan-unknown'}, String(c.unknown)), ' unknown, ', String(c.unchanged), ' unchanged, ', String(c.failed), ' failed.'),
    items.length ? h('ul', {class: 'plan'}, items) : h('p', {class: 'muted'}, 'Every host carries what the scenario asks.'));
}

export async function runPage(main, {id, signal}) {
  let run = await api.call('GET', '/v1/runs/' + encodeURIComponent(id));
  if (signal.aborted) return;
  let state = TERMINAL.has(run.phase) ? RunState.fromRun(run) : new RunState(run);
  let live = !TERMINAL.has(run.phase);
  const head = h('div', {class: 'run-head'});
  const body = h('div', {});
  // The approvals and what the last action was refused with: redrawn
  // only when they change, so that a reason being typed, the buttons and
  // a refusal outlive the redraws the run's events bring.
  const decision = h('div', {class: 'run-decision'});
  const status = h('p', {class: 'muted', id: 'stream-status'});
  replace(main, head, decision, status, body);

  // What the last cancel, approve or reject was refused with, and how
  // many refusals there were (each is drawn afresh).
  let refused = null, refusals = 0;
  let shownDecision = ''; // what decision shows, to redraw it only when that changes
  const cancel = async (btn) => {
    btn.disabled = true;
    refused = null;
    try {
      run = await api.call('POST', '/v1/runs/' + encodeURIComponent(id) + '/cancel');
      state.phase = run.phase;
    } catch (e) {
      refused = e;
      refusals++;
    }
    draw();
  };

  // A step an approval policy holds: another person approves or rejects
  // it with a reason.
  const decide = async (verb, btn) => {
    const reason = decision.querySelector('#approval-reason').value.trim();
    if (!reason) {
      decision.querySelector('#approval-reason').focus();
      return;
    }
    btn.disabled = true;
    refused = null;
    try {
      run = await api.call('POST', '/v1/runs/' + encodeURIComponent(id) + '/' + verb, {reason});
      state.phase = run.phase;
    } catch (e) {
      refused = e;
      refusals++;
    }
    draw();
  };
  const approvals = () => {
    const list = run.approvals || [];
    if (!list.length) return null;
    const pending = list.find(a => a.status === 'pending');
    return h('div', {class: 'approvals', id: 'approvals'},
      h('h2', {}, 'Approvals'),
      h('ul', {}, list.map(a => h('li', {dataset: {status: a.status}},
        badge(a.status), ' ', h('strong', {}, a.step), ' ', h('span', {class: 'muted mono'}, a.module), ' — ', a.why,
        a.status === 'pending' ? h('span', {class: 'muted'}, ' (expires ', time(a.expires_at), ')') : null,
        a.decided_by ? h('div', {class: 'muted'}, a.status + ' by ', h('span', {class: 'mono'}, a.person || a.decided_by), a.reason ? ': ' + a.reason : '') : null))),
      pending && state.phase === 'AwaitingApproval' && api.can('run.approve') ? h('div', {class: 'decide'},
        h('label', {}, 'Reason ', h('input', {type: 'text', id: 'approval-reason', maxlength: '1000', placeholder: 'why (kept in the audit log)'})),
        h('button', {type: 'button', id: 'approve', onclick: (e) => decide('approve', e.target)}, 'Approve'),
        h('button', {type: 'button', class: 'danger', id: 'reject', onclick: (e) => decide('reject', e.target)}, 'Reject')) : null);
  };

  const draw = () => {
    const terminal = TERMINAL.has(state.phase);
    const shownLog = body.querySelector('details.log');
    const logOpen = shownLog ? shownLog.open : state.logs.length > 0 && state.logs.length < 50;
    replace(head,
      h('h1', {}, 'Run ', h('span', {class: 'mono'}, run.id)),
      h('dl', {class: 'facts'},
        h('dt', {}, 'Scenario'), h('dd', {}, run.name || '—'),
        h('dt', {}, 'Project'), h('dd', {id: 'run-project'}, run.project || 'default'),
        h('dt', {}, 'Phase'), h('dd', {id: 'run-phase', 'data-phase': state.phase}, badge(state.phase)),
        h('dt', {}, 'Mode'), h('dd', {id: 'run-mode', 'data-mode': run.mode || 'apply'}, run.mode === 'check' ? 'check — changes nothing, says what an apply would change' : 'apply'),
        h('dt', {}, 'Created'), h('dd', {}, time(run.created_at), ' by ', h('span', {class: 'mono'}, run.created_by)),
        h('dt', {}, 'Duration'), h('dd', {}, !terminal && run.started_at
          ? h('span', {class: 'elapsed', dataset: {started: new Date(run.started_at).getTime()}}, runDuration(run))
          : runDuration(run) || '—'),
        run.key ? [h('dt', {}, 'Key'), h('dd', {class: 'mono'}, run.key)] : null),
      !terminal && api.can('run.cancel') ? h('button', {type: 'button', class: 'danger', id: 'cancel', onclick: (e) => cancel(e.target)}, 'Cancel run') : null,
      state.error ? h('div', {class: 'error'}, h('strong', {}, state.error.code || 'error'), ' ', state.error.message) : null);
    const shown = JSON.stringify([run.approvals || [], state.phase, refused ? refusals : 0]);
    if (shown !== shownDecision) {
      // A reason being typed stays when the approvals change under it.
      const typing = decision.querySelector('#approval-reason');
      const typed = typing ? typing.value : '';
      const focused = typing !== null && document.activeElement === typing;
      replace(decision, approvals(), refused ? errorBox(refused) : null);
      shownDecision = shown;
      const box = decision.querySelector('#approval-reason');
      if (box) {
        box.value = typed;
        if (focused) box.focus();
      }
    }
    replace(body,
      h('h2', {}, 'Steps × hosts'), grid(state),
      h('h2', {}, 'Recap'), recap(state),
      terminal && run.mode === 'check' ? [h('h2', {}, 'Plan'), plan(run)] : null,
      terminal ? [
        h('h2', {}, 'Outputs'), json(run.outputs ?? {}, 'json outputs'),
        run.message && run.phase !== 'Succeeded' ? [h('h2', {}, 'Message'), h('pre', {class: 'json'}, run.message)] : null,
      ] : null,
      h('h2', {}, 'Input'), json(run.input ?? {}, 'json'),
      h('details', {class: 'log', open: logOpen},
        h('summary', {}, 'Log (' + state.logs.length + ')'),
        h('ol', {}, state.logs.map(l => h('li', {}, h('span', {class: 'muted'}, l.at ? l.at.toISOString().slice(11, 23) : ''), ' ',
          [l.step, l.sid].filter(Boolean).join(' '), ' ', l.stream ? l.stream + ': ' : '', l.text)))));
  };
  draw();

  // Elapsed times of running targets tick every second.
  const tick = setInterval(() => {
    for (const el of main.querySelectorAll('.elapsed[data-started]')) el.textContent = duration(Date.now() - Number(el.dataset.started));
  }, 1000);
  signal.addEventListener('abort', () => clearInterval(tick));

  let pending = false;
  const refresh = async () => { // the run as stored: outputs, message, canonical statuses
    run = await api.call('GET', '/v1/runs/' + encodeURIComponent(id));
    if (signal.aborted) return;
    if (TERMINAL.has(run.phase)) {
      const logs = state.logs;
      state = RunState.fromRun(run);
      state.logs = logs;
    }
    draw();
  };
  status.textContent = live ? 'Live: following the run\'s events.' : 'Finished.';
  events.follow(id, {signal, onError: () => { status.textContent = 'Connection lost; reconnecting…'; },
    onUpdate: (u) => {
      if (signal.aborted) return;
      if (u.type === events.DENIED) {
        status.replaceChildren(errorBox({problem: u.problem}));
        return;
      }
      if (u.type === events.END) {
        status.textContent = 'Finished.';
        live = false;
        refresh().catch(e => status.replaceChildren(errorBox(e)));
        return;
      }
      if (u.type === events.PHASE && u.phase === 'Running' && !run.started_at && u.at) run.started_at = u.at.toISOString();
      if (u.type === events.PHASE && u.phase === 'AwaitingApproval') refresh().catch(e => status.replaceChildren(errorBox(e))); // the approval asked
      if (live || u.type === events.LOG) state.apply(u);
      if (live) status.textContent = 'Live: following the run\'s events.';
      if (!pending) { // a burst of events is drawn once
        pending = true;
        setTimeout(() => { pending = false; if (!signal.aborted) draw(); }, 50);
      }
    }}).catch(e => status.replaceChildren(errorBox(e)));
}
