// dom.js builds DOM nodes from data. Text always goes in as text nodes:
// nothing the API returns is ever parsed as HTML.

// h returns a new element: h('a', {href: '#/x', class: 'c'}, 'text', child…).
// Attributes named on* take a function (an event listener); true sets a
// boolean attribute; null, undefined and false leave it out.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// replace empties el and fills it with children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// table renders a list: columns are {label, cell(item) -> node|text,
// class?}. On a narrow screen each row becomes a card whose cells are
// labelled (data-label), so a list never scrolls sideways.
export function table(columns, items, opts = {}) {
  const head = h('thead', {}, h('tr', {}, columns.map(c => h('th', {scope: 'col', class: c.class}, c.label))));
  const rows = items.map(it => h('tr', opts.row ? opts.row(it) : {},
    columns.map(c => h('td', {'data-label': c.label, class: c.class}, h('div', {class: 'v'}, c.cell(it))))));
  if (items.length === 0) {
    rows.push(h('tr', {class: 'empty'}, h('td', {colspan: columns.length}, opts.empty || 'Nothing here yet.')));
  }
  return h('table', {class: 'list ' + (opts.class || '')}, head, h('tbody', {}, rows));
}

// badge is a coloured status label; data-status lets styles and tests
// find it.
export function badge(status) {
  const s = String(status || 'unknown');
  return h('span', {class: 'badge st-' + s.toLowerCase(), 'data-status': s}, s);
}

export function time(at) {
  if (!at) return '—';
  const d = new Date(at);
  if (isNaN(d)) return '—';
  return h('time', {datetime: d.toISOString(), title: d.toISOString()}, d.toLocaleString());
}

// duration formats milliseconds as 850ms, 12.3s, 4m05s or 2h03m.
export function duration(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return '';
  ms = Math.max(0, Math.round(ms));
  if (ms < 1000) return ms + 'ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  return Math.floor(m / 60) + 'h' + String(m % 60).padStart(2, '0') + 'm';
}

// json renders a value as indented JSON text in a <pre>.
export function json(v, cls = 'json') {
  let text;
  try { text = typeof v === 'string' ? v : JSON.stringify(v, null, 2); } catch { text = String(v); }
  return h('pre', {class: cls}, text === undefined ? 'null' : text);
}

// errorBox shows a failed request: the problem's code and detail, and
// where in the input each problem is.
export function errorBox(err) {
  const p = err && err.problem ? err.problem : null;
  return h('div', {class: 'error', role: 'alert'},
    h('strong', {}, p && p.code ? p.code : 'error'), ' ',
    p ? (p.detail || p.title || '') : String(err && err.message || err),
    p && p.errors && p.errors.length ? h('ul', {}, p.errors.map(e => h('li', {}, (e.location ? e.location + ': ' : '') + e.message))) : null);
}

// fingerprint returns the SHA256:… fingerprint of an authorized_keys line,
// as ssh-keygen -l prints it, or '' when it cannot be computed.
export async function fingerprint(authorizedKey) {
  const parts = String(authorizedKey || '').trim().split(/\s+/);
  if (parts.length < 2 || !globalThis.crypto || !crypto.subtle) return '';
  try {
    const raw = Uint8Array.from(atob(parts[1]), c => c.charCodeAt(0));
    const sum = new Uint8Array(await crypto.subtle.digest('SHA-256', raw));
    return 'SHA256:' + btoa(String.fromCharCode(...sum)).replace(/=+$/, '');
  } catch {
    return '';
  }
}
