// Who this tab is to the agent: the token it sends (session storage only), the token's identity
// as the agent knows it (GET /v1/acl/token/self), the one-time sign-in link's exchange, and the
// one question every refusal raises: is the token itself refused (ask for another), or is it a
// good token that may not do this (say so, never ask again in a loop)?
//
// The agent's refusals (runtime/api/authz.py): 403 `ACL token not found` / `ACL token expired`
// for a secret that cannot act, 403 `Permission denied` for a need not met, and websockets
// closed with 1008 and the same text. An agent whose ACLs are disabled but which has a token
// (`--token-file`, runtime/server/acl/identity.py `StaticTokenResolver`) answers a wrong token
// with `Permission denied` too, so that text alone does not tell: `identify` does.
//
// No DOM here: lib.js draws. Nothing read from the agent is ever put into markup.

const TOKEN_KEY = "yurt.token";

export const TOKEN_NOT_FOUND = "ACL token not found";
export const TOKEN_EXPIRED = "ACL token expired";
export const PERMISSION_DENIED = "Permission denied";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/** Keeps `value` as the tab's token ("" forgets it) and tells the page (`yurt:token`).
 * `known`: the token's ACLToken when the caller already has it (the one-time exchange). */
export function setToken(value, known) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
  identities.clear();
  if (value && known) remember(value, known);
  window.dispatchEvent(new CustomEvent("yurt:token"));
}

// ---------- identity ----------

/** One answer per secret ("" too) while this page lives: a live page refused every few
 * seconds asks once, not each time. Dropped when the token changes or is refused outright. */
const identities = new Map();

/**
 * What the agent says of `secret` (default: the tab's token), from GET /v1/acl/token/self
 * (Nomad's "any valid token"; command/agent/acl_endpoint.go `aclTokenSelf`):
 * - `{state: "token", token}`: ACLs are enabled and the token is valid: `token` is Nomad's
 *   ACLToken (Name, AccessorID, Type, Policies, ExpirationTime; its SecretID is not kept).
 * - `{state: "open"}`: the agent accepted the secret and has no ACLs (it answers 400 `ACL
 *   support disabled`): whatever it refuses later is the secret refused. For no secret (and
 *   on an agent without the route) it is GET /v1/agent/self that is asked: open when allowed.
 * - `{state: "refused", reason}`: the secret cannot act (403, the agent's text), or there is
 *   none and the agent wants one.
 * - `{state: "unknown", reason}`: the agent did not answer; nothing is cached.
 */
export function identify(secret = token()) {
  let found = identities.get(secret);
  if (!found) {
    found = askSelf(secret);
    identities.set(secret, found);
    found.then((who) => { if (who.state === "unknown") identities.delete(secret); });
  }
  return found;
}

async function askSelf(secret) {
  // No token: there is no token to name, only whether the agent wants one (and an open agent's
  // 400 to /v1/acl/token/self would be an error in the browser's console on every page).
  if (!secret) return askAgent(secret);
  let response;
  try {
    response = await fetch("/v1/acl/token/self", { headers: secret ? { "X-Nomad-Token": secret } : {} });
  } catch {
    return { state: "unknown", reason: "the agent did not answer" };
  }
  const text = (await response.text()).trim();
  if (response.ok) {
    let body;
    try { body = JSON.parse(text); } catch { return { state: "unknown", reason: "an answer that is not JSON" }; }
    const { SecretID, ...rest } = body || {}; // kept by no one but session storage
    return { state: "token", token: rest };
  }
  if (response.status === 403) return { state: "refused", reason: text };
  if (response.status === 400) return { state: "open" }; // `ACL support disabled`: the guard let it by
  if (response.status === 404) return askAgent(secret); // an agent without ACL routes
  return { state: "unknown", reason: `${response.status}: ${text}` };
}

/** An agent without /v1/acl/token/self (one from before ACLs): whether it takes the secret
 * for /v1/agent/self, which such an agent let every accepted token read. */
async function askAgent(secret) {
  let response;
  try {
    response = await fetch("/v1/agent/self", { headers: secret ? { "X-Nomad-Token": secret } : {} });
  } catch {
    return { state: "unknown", reason: "the agent did not answer" };
  }
  if (response.status === 403) return { state: "refused", reason: (await response.text()).trim() };
  return response.ok ? { state: "open" } : { state: "unknown", reason: `${response.status}` };
}

/** The tab's identity is known from elsewhere (the one-time exchange answered it). */
function remember(secret, tokenObject) {
  const { SecretID, ...rest } = tokenObject;
  identities.set(secret, Promise.resolve({ state: "token", token: rest }));
}

/**
 * Whether a refusal (a 403's text, or a 1008 close's reason) sent with `secret` means the
 * secret itself is refused, so the person is asked for a token; false when the secret is a
 * valid token that lacks the capability: the refusal is shown where it happened instead.
 */
export async function secretRefused(secret, text) {
  if (!secret) return true; // anonymous: a token may grant what the anonymous policy does not
  if (text === TOKEN_NOT_FOUND || text === TOKEN_EXPIRED) {
    identities.delete(secret);
    return true;
  }
  if (text !== PERMISSION_DENIED) return true; // another refusal: asked for, as before ACLs
  const who = await identify(secret);
  return who.state !== "token";
}

/** An ApiError whose 403 came to a valid token that may not do this. */
export function isForbidden(err) {
  return Boolean(err && err.forbidden);
}

// ---------- the one-time sign-in link ----------

/** The `ott` of the address, taken out of it at once (history.replaceState), so that it is
 * neither bookmarked, nor sent again on a reload, nor shown; "" when there is none. */
export function takeOneTimeSecret() {
  const url = new URL(location.href);
  if (!url.searchParams.has("ott")) return "";
  const secret = url.searchParams.get("ott");
  url.searchParams.delete("ott");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  return secret.trim();
}

/** A failed one-time exchange: `message` says why; `remedy`, when set, is the command that
 * makes a new link (the page shows it as code). */
export class OneTimeError extends Error {
  constructor(message, remedy = "") {
    super(message);
    this.remedy = remedy;
  }
}

/**
 * Trades a one-time secret for the token it was made from (POST
 * /v1/acl/token/onetime/exchange, sent without any token: nomad/acl_endpoint.go
 * `ExchangeOneTimeToken`, single use) and keeps its SecretID as the tab's token. Throws a
 * OneTimeError saying why not: Nomad answers a used, expired or unknown secret alike with 403.
 */
export async function exchangeOneTimeSecret(secret) {
  let response;
  try {
    response = await fetch("/v1/acl/token/onetime/exchange", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ OneTimeSecretID: secret }),
    });
  } catch {
    throw new OneTimeError("The sign-in link could not be used: the agent did not answer.");
  }
  if (response.status === 403) {
    throw new OneTimeError("This sign-in link was already used or has expired: a one-time link " +
      "works once, within 10 minutes. Enter a token, or make a new link with", "yurt ui -authenticate");
  }
  const text = (await response.text()).trim();
  if (!response.ok) {
    throw new OneTimeError(`The sign-in link could not be used (${response.status}: ${text}).`);
  }
  let answer;
  try { answer = JSON.parse(text); } catch { answer = null; }
  const got = answer && answer.Token;
  if (!got || !got.SecretID) throw new OneTimeError("The sign-in link could not be used: the agent's answer held no token.");
  setToken(got.SecretID, got);
  return got;
}
