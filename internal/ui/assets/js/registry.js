// registry.js: souls, providers and profiles. Create and delete controls
// appear only for a token that holds the permission; the keeper refuses
// the request anyway when it does not.
import {h, replace, table, badge, time, json, errorBox, fingerprint} from './dom.js';
import * as api from './api.js';

// listPage loads every page of a list route into a table, with a delete
// button per row when the token holds perm.
async function listInto(el, path, columns, opts) {
  let items = [];
  let after = '';
  do {
    const page = await api.call('GET', path + api.query({limit: 500, after}));
    items = items.concat(page.items);
    after = page.next;
  } while (after);
  const cols = columns.slice();
  if (opts.deletePerm && api.can(opts.deletePerm)) {
    cols.push({label: '', class: 'actions', cell: it => h('button', {type: 'button', class: 'danger small', 'data-delete': opts.key(it),
      onclick: async (e) => {
        if (!confirm('Delete ' + opts.noun + ' ' + opts.key(it) + '?')) return;
        e.target.disabled = true;
        try {
          await api.call('DELETE', path + '/' + encodeURIComponent(opts.key(it)));
          await listInto(el, path, columns, opts);
        } catch (err) {
          e.target.disabled = false;
          el.prepend(errorBox(err));
        }
      }}, 'Delete')});
  }
  replace(el, table(cols, items, {empty: opts.empty, row: it => ({dataset: {key: opts.key(it)}})}));
  return items;
}

// field is a labelled form input.
function field(label, input, hint) {
  return h('div', {class: 'field'}, h('label', {for: input.id}, label), input, hint ? h('small', {class: 'muted'}, hint) : null);
}

// jsonObject parses a textarea holding a JSON object ('' is {}).
function jsonObject(text, where) {
  if (!text.trim()) return {};
  let v;
  try { v = JSON.parse(text); } catch (e) { throw new Error(where + ': not JSON: ' + e.message); }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error(where + ': must be a JSON object');
  return v;
}

// createForm is a form that posts body() to path, then calls done.
function createForm(id, title, inputs, body, path, done) {
  const msg = h('div', {});
  const form = h('form', {class: 'card create', id, onsubmit: async (e) => {
    e.preventDefault();
    replace(msg);
    const btn = form.querySelector('button[type=submit]');
    btn.disabled = true;
    try {
      await api.call('POST', path, body());
      form.reset();
      await done();
    } catch (err) {
      replace(msg, errorBox(err));
    } finally {
      btn.disabled = false;
    }
  }}, h('h2', {}, title), inputs, h('button', {type: 'submit', class: 'primary'}, 'Create'), msg);
  return form;
}

export async function soulsPage(main) {
  const list = h('div', {id: 'souls'});
  replace(main, h('h1', {}, 'Souls'), list);
  const souls = await listInto(list, '/v1/souls', [
    {label: 'SID', cell: s => h('span', {class: 'mono'}, s.sid)},
    {label: 'Status', cell: s => [badge(s.status), s.last_error ? h('div', {class: 'cell-error'}, s.last_error) : null]},
    {label: 'Last contact', cell: s => time(s.last_seen_at)},
    {label: 'Provider', cell: s => s.provider || '—'},
    {label: 'Address', cell: s => h('span', {class: 'mono'}, s.primary_ip || s.address || '—')},
    {label: 'Host key', cell: s => s.connection && s.connection.host_key
      ? h('span', {class: 'mono fp', 'data-host-key': s.connection.host_key}, s.connection.host_key.split(' ')[0])
      : h('span', {class: 'muted'}, 'not pinned yet')},
  ], {key: s => s.sid, noun: 'soul', deletePerm: 'soul.delete', empty: 'No soul registered yet.'});
  // Fingerprints are computed here, from the pinned key the API returns.
  for (const el of list.querySelectorAll('[data-host-key]')) {
    const fp = await fingerprint(el.dataset.hostKey);
    if (fp) el.textContent = el.dataset.hostKey.split(' ')[0] + ' ' + fp;
  }
  return souls;
}

export async function providersPage(main) {
  const list = h('div', {id: 'providers'});
  const draw = () => listInto(list, '/v1/providers', [
    {label: 'Name', cell: p => h('span', {class: 'mono'}, p.name)},
    {label: 'Driver', cell: p => p.driver},
    {label: 'Region', cell: p => p.region || '—'},
    {label: 'Credentials', cell: p => h('span', {class: 'mono'}, p.credentials_ref || '—')},
    {label: 'FQDN suffix', cell: p => p.fqdn_suffix || '—'},
    {label: 'Created', cell: p => time(p.created_at)},
  ], {key: p => p.name, noun: 'provider', deletePerm: 'provider.delete', empty: 'No provider yet.'});
  let form = null;
  if (api.can('provider.create')) {
    const i = (id, attrs = {}) => h('input', {id, name: id, ...attrs});
    const name = i('p-name', {required: true, pattern: '[a-z0-9][a-z0-9-]{0,62}', placeholder: 'local'});
    const driver = i('p-driver', {required: true, placeholder: 'local'});
    const region = i('p-region');
    const cred = i('p-cred', {placeholder: 'env:NAME, file:/path or vault:path#field'});
    const suffix = i('p-suffix', {placeholder: 'local.test'});
    const config = h('textarea', {id: 'p-config', name: 'config', rows: 3, placeholder: '{}'});
    form = createForm('provider-create', 'New provider', [
      field('Name', name), field('Driver', driver, 'the plugin soul-cloud-<driver>'), field('Region', region),
      field('Credentials reference', cred, 'a reference, never the credentials: resolved only when used'),
      field('FQDN suffix', suffix), field('Config (JSON object)', config)],
    () => ({name: name.value.trim(), driver: driver.value.trim(), region: region.value.trim() || undefined,
      credentials_ref: cred.value.trim() || undefined, fqdn_suffix: suffix.value.trim() || undefined,
      config: jsonObject(config.value, 'config')}), '/v1/providers', draw);
  }
  replace(main, h('h1', {}, 'Providers'), list, form);
  await draw();
}

export async function profilesPage(main) {
  const list = h('div', {id: 'profiles'});
  const draw = () => listInto(list, '/v1/profiles', [
    {label: 'Name', cell: p => h('span', {class: 'mono'}, p.name)},
    {label: 'Provider', cell: p => p.provider},
    {label: 'Spec', cell: p => json(p.spec, 'json small')},
    {label: 'Created', cell: p => time(p.created_at)},
  ], {key: p => p.name, noun: 'profile', deletePerm: 'profile.delete', empty: 'No profile yet.'});
  let form = null;
  if (api.can('profile.create')) {
    const name = h('input', {id: 'pr-name', name: 'name', required: true, placeholder: 'small'});
    const provider = h('select', {id: 'pr-provider', name: 'provider', required: true});
    const spec = h('textarea', {id: 'pr-spec', name: 'spec', rows: 4, placeholder: '{"image": "debian-12", "size": "small"}'});
    form = createForm('profile-create', 'New profile', [field('Name', name), field('Provider', provider), field('Spec (JSON object)', spec)],
      () => ({name: name.value.trim(), provider: provider.value, spec: jsonObject(spec.value, 'spec')}), '/v1/profiles', draw);
    if (api.can('provider.read')) {
      api.call('GET', '/v1/providers?limit=1000').then(l => replace(provider,
        l.items.map(p => h('option', {value: p.name}, p.name)))).catch(() => {});
    }
  }
  replace(main, h('h1', {}, 'Profiles'), list, form);
  await draw();
}
