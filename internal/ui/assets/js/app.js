// app.js is the shell: sign-in, navigation (hash routes, so the keeper
// serves one page) and the pages' life cycle.
import {h, replace, errorBox} from './dom.js';
import * as api from './api.js';
import {runsPage, runPage} from './runs.js';
import {soulsPage, providersPage, profilesPage} from './registry.js';
import {tokensPage, auditPage} from './admin.js';
import {modulesPage, modulePage} from './modules.js';
import {driftPage} from './drift.js';

// pages, in navigation order; perm hides a page the token cannot read.
const pages = [
  {path: 'runs', label: 'Runs', perm: 'run.read', render: runsPage},
  {path: 'souls', label: 'Souls', perm: 'soul.read', render: soulsPage},
  {path: 'drift', label: 'Drift', perm: 'soul.read', render: driftPage},
  {path: 'providers', label: 'Providers', perm: 'provider.read', render: providersPage},
  {path: 'profiles', label: 'Profiles', perm: 'profile.read', render: profilesPage},
  {path: 'tokens', label: 'Tokens', perm: 'token.manage', render: tokensPage},
  {path: 'audit', label: 'Audit', perm: 'audit.read', render: auditPage},
  {path: 'modules', label: 'Modules', perm: '', render: modulesPage},
];
const details = {runs: runPage, modules: modulePage};

const main = document.getElementById('main');
let current = null; // AbortController of the page shown

// route parses location.hash: #/runs/run_1?phase=Failed -> {page, id, params}.
function route() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, q] = raw.split('?');
  const [page, ...rest] = path.split('/');
  return {page: page || '', id: rest.map(decodeURIComponent).join('/'), params: new URLSearchParams(q || '')};
}

function drawNav(active) {
  const nav = document.getElementById('nav');
  const who = document.getElementById('who');
  const s = api.current();
  nav.hidden = who.hidden = !s;
  if (!s) return;
  replace(nav, pages.filter(p => !p.perm || api.can(p.perm)).map(p =>
    h('a', {href: '#/' + p.path, 'aria-current': p.path === active ? 'page' : null}, p.label)));
  replace(document.getElementById('who-name'), h('span', {class: 'muted'}, 'signed in as '),
    s.person ? s.person.name + ' (' + s.name + ')' : s.name, ' ', h('span', {class: 'role'}, s.role),
    ' ', h('span', {class: 'project', id: 'who-project'}, s.project ? 'in project ' + s.project : 'in every project'));
}

async function show() {
  if (current) current.abort();
  current = new AbortController();
  const signal = current.signal;
  const r = route();
  if (!api.current()) {
    drawNav('');
    signInPage();
    return;
  }
  const first = pages.find(p => !p.perm || api.can(p.perm));
  let p = pages.find(x => x.path === r.page);
  if (!p) {
    location.replace('#/' + first.path);
    return;
  }
  drawNav(p.path);
  const render = r.id && details[p.path] ? details[p.path] : p.render;
  replace(main, h('p', {class: 'muted', id: 'loading'}, 'Loading…'));
  try {
    await render(main, {id: r.id, params: r.params, signal, navigate: (hash) => { location.hash = hash; }});
  } catch (e) {
    if (!signal.aborted) replace(main, errorBox(e));
  }
}

function signInPage() {
  const input = h('input', {type: 'password', id: 'token', autocomplete: 'off', required: true,
    placeholder: 'sst_…', spellcheck: 'false'});
  const msg = h('div', {id: 'signin-error'});
  const form = h('form', {class: 'card signin', id: 'signin', onsubmit: async (e) => {
    e.preventDefault();
    replace(msg);
    const token = input.value.trim();
    input.value = ''; // the token is the keeper's to keep from now on
    try {
      await api.signIn(token);
      if (!route().page) location.hash = '#/runs';
      show();
    } catch (err) {
      replace(msg, errorBox(err));
    }
  }},
  h('h1', {}, 'Sign in'),
  h('p', {class: 'muted'}, 'Paste an API token (soulctl token create, or the keeper\'s admin.token). ' +
    'The keeper checks it once and starts a session for this tab; the token itself is not kept.'),
  h('label', {for: 'token'}, 'API token'), input,
  h('button', {type: 'submit', class: 'primary'}, 'Sign in'), msg);
  replace(main, form);
  input.focus();
  api.authMethods().then(m => {
    if (!m.oidc || !form.isConnected) return;
    form.insertBefore(h('a', {class: 'button primary', id: 'sign-in-oidc', href: '/v1/auth/oidc/login?return_to=' + encodeURIComponent('/ui/')},
      'Sign in with your identity provider'), form.children[1]);
  });
}

document.getElementById('sign-out').addEventListener('click', async () => {
  try { await api.signOut(); } catch { /* the cookie is cleared or already useless */ }
  location.hash = '#/';
  show();
});
api.whenSignedOut(() => show());
// While a page is still loading, it says what it waits for.
api.whenWaiting(({path, why, attempt, of}) => {
  const loading = document.getElementById('loading');
  if (loading) loading.textContent = 'Loading… GET ' + path + ': ' + why + '; asking the keeper again (attempt ' + attempt + ' of ' + of + ').';
});
window.addEventListener('hashchange', show);

(async () => {
  api.adoptSignIn();
  try {
    await api.loadSession();
  } catch (e) {
    replace(main, errorBox(e));
    return;
  }
  show();
})();
