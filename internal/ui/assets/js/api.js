// api.js is the UI's only way to the keeper: the REST API with the session
// cookie (the browser attaches it; scripts never see it) and the session's
// key, which only this page holds (sessionStorage belongs to this origin,
// port included) and sends on every request: the cookie alone opens
// nothing. Problems are turned into errors.

const KEY = 'soulstack.session_key';
let session = null; // GET /v1/whoami: {id, name, role, permissions, via}
let onSignedOut = () => {};
let memKey = ''; // the key when the browser gives no sessionStorage

function sessionKey() {
  try { return sessionStorage.getItem(KEY) || memKey; } catch { return memKey; }
}

function keepKey(key) {
  memKey = key;
  try {
    if (key) sessionStorage.setItem(KEY, key); else sessionStorage.removeItem(KEY);
  } catch { /* no storage: this page only */ }
}

// authHeaders are the headers that authenticate this page's requests.
export function authHeaders() {
  const key = sessionKey();
  return key ? {'X-CSRF-Token': key} : {};
}

// Problem is a non-2xx answer: problem holds the RFC 9457 document with
// its stable dotted code.
export class Problem extends Error {
  constructor(problem, status) {
    super((problem && (problem.detail || problem.title)) || 'HTTP ' + status);
    this.problem = problem || {};
    this.status = status;
    this.code = this.problem.code || '';
  }
}

// A GET changes nothing, so one the keeper has not answered within
// GET_TIMEOUT_MS, or whose connection broke (a keeper restarting), is
// sent again, up to GET_ATTEMPTS times in all: a request lost on the way
// does not leave a page waiting for ever. The function given to
// whenWaiting is told before each new attempt.
const GET_TIMEOUT_MS = 10000;
const GET_ATTEMPTS = 3;
let onWaiting = () => {};

export function whenWaiting(fn) { onWaiting = fn; }

// call sends one request and returns the decoded JSON answer (null for
// 204). A 401 means the session is gone: the sign-in page is shown.
export async function call(method, path, body) {
  if (method !== 'GET') return send(method, path, body);
  for (let attempt = 1; ; attempt++) {
    try {
      return await send(method, path, body, AbortSignal.timeout(GET_TIMEOUT_MS));
    } catch (e) {
      const timedOut = e.name === 'TimeoutError';
      if (!timedOut && !(e instanceof TypeError)) throw e; // an answer, not a lost request
      const why = timedOut ? 'no answer within ' + GET_TIMEOUT_MS / 1000 + ' s' : 'the connection broke';
      if (attempt >= GET_ATTEMPTS) {
        throw new Error('The keeper did not answer GET ' + path + ' (' + why + ', ' + attempt + ' attempts).');
      }
      onWaiting({path, why, attempt: attempt + 1, of: GET_ATTEMPTS});
      if (!timedOut) await new Promise(r => setTimeout(r, 500 * attempt));
    }
  }
}

async function send(method, path, body, signal) {
  const headers = {Accept: 'application/json', ...authHeaders()};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, credentials: 'same-origin', cache: 'no-store', redirect: 'error', signal,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    if (res.status === 401 && path !== '/v1/session' && path !== '/v1/whoami') {
      session = null;
      keepKey('');
      onSignedOut();
    }
    throw new Problem(data || {status: res.status, title: res.statusText}, res.status);
  }
  return data;
}

// query builds ?a=b&… from the set values of params.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
}

// loadSession asks who the session signs in; null when nobody is (or
// this tab holds no session key).
export async function loadSession() {
  if (!sessionKey()) {
    session = null;
    return null;
  }
  try {
    session = await call('GET', '/v1/whoami');
  } catch (e) {
    if (e.status !== 401) throw e;
    session = null;
  }
  return session;
}

// signIn posts the token once; the keeper answers with a session: its id
// in an HttpOnly cookie, its key (csrf) kept here. The token is not kept.
export async function signIn(token) {
  const s = await call('POST', '/v1/session', {token});
  keepKey(s.csrf);
  delete s.csrf;
  session = s;
  return session;
}

// adoptSignIn keeps the key of a session the keeper started at an OIDC
// sign-in: it arrives in the URL fragment (#csrf=…), which browsers never
// send to a server, and is taken out of the address at once. It reports
// whether there was one.
export function adoptSignIn() {
  const m = /^#csrf=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!m) return false;
  keepKey(m[1]);
  history.replaceState(null, '', location.pathname + '#/runs');
  return true;
}

// authMethods says how this keeper signs people in: {oidc: bool}.
export async function authMethods() {
  try { return await call('GET', '/v1/auth/methods'); } catch { return {oidc: false}; }
}

export async function signOut() {
  try { await call('DELETE', '/v1/session'); } finally {
    session = null;
    keepKey('');
  }
}

export function current() { return session; }

// can reports whether the signed-in token holds a permission. It only
// decides what the UI shows: the keeper checks every request itself.
export function can(permission) {
  return !!session && session.permissions.includes(permission);
}

export function whenSignedOut(fn) { onSignedOut = fn; }
