// admin.js: API tokens (token.manage) and the audit log with the result
// of verifying its hash chain (audit.read).
import {h, replace, table, badge, time, json, errorBox} from './dom.js';
import * as api from './api.js';

const ROLES = ['viewer', 'operator', 'admin'];

export async function tokensPage(main) {
  const list = h('div', {id: 'tokens'});
  const shown = h('div', {id: 'token-shown'});
  const draw = async () => {
    let items = [], after = '';
    do {
      const page = await api.call('GET', '/v1/tokens' + api.query({limit: 500, after}));
      items = items.concat(page.items);
      after = page.next;
    } while (after);
    const me = api.current();
    replace(list, table([
      {label: 'ID', cell: t => h('span', {class: 'mono'}, t.id, t.id === me.id ? h('span', {class: 'muted'}, ' (this session)') : null)},
      {label: 'Name', cell: t => t.name},
      {label: 'Person', cell: t => t.person ? h('span', {title: t.person.subject + ' at ' + t.person.issuer}, t.person.name) : h('span', {class: 'muted'}, 'minted by ' + t.created_by)},
      {label: 'Role', cell: t => t.role},
      {label: 'Project', cell: t => t.project || h('span', {class: 'muted'}, 'every project')},
      {label: 'Permissions', cell: t => h('span', {class: 'perms'}, t.permissions.join(' '))},
      {label: 'State', cell: t => badge(t.active ? 'active' : (t.revoked_at ? 'revoked' : 'expired'))},
      {label: 'Created', cell: t => time(t.created_at)},
      {label: 'Expires', cell: t => t.expires_at ? time(t.expires_at) : 'never'},
      {label: '', class: 'actions', cell: t => t.active ? h('button', {type: 'button', class: 'danger small', 'data-delete': t.id, onclick: async (e) => {
        if (!confirm('Revoke token ' + t.name + ' (' + t.id + ')?' + (t.id === me.id ? ' This signs you out.' : ''))) return;
        e.target.disabled = true;
        try {
          await api.call('DELETE', '/v1/tokens/' + encodeURIComponent(t.id));
          await draw();
        } catch (err) {
          e.target.disabled = false;
          list.prepend(errorBox(err));
        }
      }}, 'Revoke') : null},
    ], items, {row: t => ({dataset: {key: t.id}})}));
  };
  const name = h('input', {id: 't-name', name: 'name', required: true, placeholder: 'ci-deploy'});
  const role = h('select', {id: 't-role', name: 'role'}, ROLES.map(r => h('option', {value: r}, r)));
  const msg = h('div', {});
  const form = h('form', {class: 'card create', id: 'token-create', onsubmit: async (e) => {
    e.preventDefault();
    replace(msg);
    replace(shown);
    try {
      const t = await api.call('POST', '/v1/tokens', {name: name.value.trim(), role: role.value});
      form.reset();
      // The plain token is in this answer only: shown once, never stored.
      const out = h('input', {type: 'text', readonly: true, class: 'mono secret-once', value: t.token, id: 'new-token',
        onfocus: (ev) => ev.target.select()});
      replace(shown, h('div', {class: 'card notice', role: 'status'},
        h('strong', {}, 'Token ' + t.name + ' (' + t.role + ') created.'),
        h('p', {}, 'Copy it now: it is shown once and the keeper keeps only its hash.'), out,
        h('button', {type: 'button', onclick: () => replace(shown)}, 'Done, hide it')));
      await draw();
    } catch (err) {
      replace(msg, errorBox(err));
    }
  }}, h('h2', {}, 'New token'),
  h('div', {class: 'field'}, h('label', {for: 't-name'}, 'Name'), name),
  h('div', {class: 'field'}, h('label', {for: 't-role'}, 'Role'), role),
  h('button', {type: 'submit', class: 'primary'}, 'Create'), msg);
  replace(main, h('h1', {}, 'API tokens'), shown, list, form);
  await draw();
}

function verifyBox(v) {
  if (!v) return h('p', {class: 'muted'}, 'Verification unavailable.');
  return h('div', {class: 'card verify ' + (v.ok ? 'ok' : 'bad'), id: 'audit-verify', 'data-ok': String(v.ok)},
    h('strong', {}, v.ok ? 'Chain verified' : 'Chain verification FAILED'), ' ',
    `${v.checked} row(s) checked up to #${v.head_seq}, ${v.checkpoints} signed checkpoint(s)` + (v.legacy ? `, ${v.legacy} legacy row(s)` : '') + '.',
    v.problems && v.problems.length ? h('ul', {}, v.problems.map(p => h('li', {}, h('span', {class: 'mono'}, '#' + p.seq + ' ' + p.kind), ' ', p.message))) : null);
}

export async function auditPage(main) {
  const head = await api.call('GET', '/v1/audit?verify=true&limit=1');
  const v = head.verify;
  const list = h('div', {id: 'audit'});
  const more = h('div', {class: 'more'});
  replace(main, h('h1', {}, 'Audit log'), verifyBox(v), list, more);
  const pageSize = 100;
  let items = [];
  // Newest first: the API pages forward from a sequence number.
  const load = async (upTo) => {
    const after = Math.max(0, upTo - pageSize);
    const page = upTo > 0 ? await api.call('GET', '/v1/audit' + api.query({limit: upTo - after, after})) : {items: []};
    items = items.concat(page.items.slice().reverse());
    replace(list, table([
      {label: '#', cell: e => String(e.seq)},
      {label: 'At', cell: e => time(e.at)},
      {label: 'Actor', cell: e => h('span', {class: 'mono'}, e.actor_aid)},
      {label: 'Action', cell: e => e.action},
      {label: 'Object', cell: e => h('span', {class: 'mono'}, e.object)},
      {label: 'Payload', cell: e => h('details', {}, h('summary', {}, 'show'), json(e.payload, 'json small'))},
    ], items, {empty: 'No audit event yet.'}));
    replace(more, after > 0 ? h('button', {type: 'button', onclick: () => load(after)}, 'Older') : null);
  };
  await load(v ? v.head_seq : pageSize);
}
