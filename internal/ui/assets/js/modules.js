// modules.js: the module catalog and one module's page, from
// GET /v1/modules and GET /v1/modules/{id}.
import {h, replace, table} from './dom.js';
import * as api from './api.js';

function moduleLink(m) {
  return h('a', {href: '#/modules/' + encodeURIComponent(m.id), class: 'mono'}, m.id);
}

export async function modulesPage(main) {
  // The whole catalog, page after page.
  const list = {items: []};
  for (let after = ''; ;) {
    const page = await api.call('GET', '/v1/modules' + api.query({limit: 1000, after}));
    list.items.push(...page.items);
    if (!page.next) break;
    after = page.next;
  }
  const filter = h('input', {type: 'search', id: 'module-filter', placeholder: 'filter by id or summary…'});
  const body = h('div', {id: 'modules'});
  const draw = () => {
    const q = filter.value.trim().toLowerCase();
    const items = list.items.filter(m => !q || m.id.includes(q) || m.summary.toLowerCase().includes(q));
    replace(body, table([
      {label: 'Module', cell: moduleLink},
      {label: 'Runs on', cell: m => m.side},
      {label: 'Summary', cell: m => m.summary},
    ], items, {empty: 'No module matches.'}));
  };
  filter.addEventListener('input', draw);
  replace(main, h('h1', {}, 'Module catalog'), h('div', {class: 'filters'}, filter), body);
  draw();
}

function paramType(p) {
  return p.type + (p.elem ? '<' + p.elem + '>' : '');
}

export async function modulePage(main, {id}) {
  const m = await api.call('GET', '/v1/modules/' + encodeURIComponent(id));
  const exclusive = (m.exclusive || []).map(g => (g.required ? 'exactly one of ' : 'at most one of ') + g.params.join(', '));
  replace(main,
    h('p', {}, h('a', {href: '#/modules'}, '← catalog')),
    h('h1', {class: 'mono'}, m.id),
    h('p', {class: 'lead'}, m.summary),
    (m.description || '').split(/\n\s*\n/).filter(Boolean).map(p => h('p', {}, p)),
    h('dl', {class: 'facts'},
      h('dt', {}, 'Runs on'), h('dd', {}, m.side === 'keeper' ? 'the keeper (the step says on: keeper)' : 'the step\'s target souls'),
      h('dt', {}, 'Idempotent'), h('dd', {}, m.idempotent ? 'yes' : 'no'),
      h('dt', {}, 'Needs root'), h('dd', {}, m.needs_root ? 'yes' : 'no'),
      m.permission ? [h('dt', {}, 'Permission'), h('dd', {class: 'mono'}, m.permission)] : null,
      h('dt', {}, 'Changes when'), h('dd', {}, m.changes_when || '—'),
      h('dt', {}, 'Unchanged when'), h('dd', {}, m.unchanged_when || '—'),
      h('dt', {}, 'In a check run'), h('dd', {}, m.check_mode || 'No check path: reported unknown.')),
    h('h2', {}, 'Params'),
    table([
      {label: 'Name', cell: p => h('span', {class: 'mono'}, p.name)},
      {label: 'Type', cell: p => h('span', {class: 'mono'}, paramType(p))},
      {label: 'Required', cell: p => p.required ? 'yes' : ''},
      {label: 'Default', cell: p => p.default !== undefined ? h('code', {}, JSON.stringify(p.default)) : (p.default_doc || '')},
      {label: 'Doc', cell: p => [p.doc, p.enum ? h('div', {class: 'muted'}, 'one of: ' + p.enum.join(', ')) : null, p.secret ? h('div', {class: 'muted'}, 'secret: masked everywhere') : null]},
    ], m.params || [], {empty: 'No params.'}),
    exclusive.length ? h('ul', {}, exclusive.map(e => h('li', {}, e))) : null,
    h('h2', {}, 'Output'),
    table([
      {label: 'Field', cell: f => h('span', {class: 'mono'}, f.name)},
      {label: 'Type', cell: f => h('span', {class: 'mono'}, f.type)},
      {label: 'Doc', cell: f => f.doc},
    ], m.output || [], {empty: 'No output.'}),
    m.example ? [h('h2', {}, 'Example'), h('pre', {class: 'json'}, m.example)] : null,
    m.notes && m.notes.length ? [h('h2', {}, 'Notes'), h('ul', {}, m.notes.map(n => h('li', {}, n)))] : null);
}
