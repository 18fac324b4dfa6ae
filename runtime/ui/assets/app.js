// The UI's entry point: the router (Nomad's UI paths, history navigation without reloads), the
// header (current section, live indicator, who is signed in, token button) and the page
// lifecycle. A page is a module in pages/ whose default export is `mount(view, params, ctx)`; on
// navigation its ctx.signal is aborted and its event listeners dropped, so a left page never
// updates. An address with `?ott=` (`yurt ui -authenticate`, Nomad's command/ui.go) is a
// one-time sign-in: the secret leaves the address bar and is exchanged before anything else.

import { ApiError, editToken, errorBox, h, markFresh, markStale, onEvent, replace, toast } from "./lib.js";
import { connectEvents } from "./live.js";
import { exchangeOneTimeSecret, identify, setToken, takeOneTimeSecret, token } from "./session.js";

const ROUTES = [
  [/^\/ui\/jobs\/?$/, "jobs", []],
  [/^\/ui\/jobs\/run\/?$/, "jobrun", []],
  [/^\/ui\/jobs\/([^/]+)(?:\/([^/]+))?\/?$/, "job", ["id", "section"]],
  [/^\/ui\/allocations\/([^/]+)\/?$/, "allocation", ["id"]],
  [/^\/ui\/allocations\/([^/]+)\/([^/]+)\/logs\/?$/, "logs", ["id", "task"]],
  [/^\/ui\/allocations\/([^/]+)\/([^/]+)\/?$/, "allocation", ["id", "task"]],
  [/^\/ui\/clients\/?$/, "clients", []],
  [/^\/ui\/clients\/([^/]+)\/?$/, "client", ["id"]],
  [/^\/ui\/evaluations\/?$/, "evaluations", []],
  [/^\/ui\/events\/?$/, "events", []],
  [/^\/ui\/settings\/tokens\/?$/, "tokens", []],
];

const NAV = { jobs: "jobs", jobrun: "jobs", job: "jobs", allocation: "jobs", logs: "jobs",
  clients: "clients", client: "clients", evaluations: "evaluations", events: "events", tokens: "" };

let current = null; // {controller, unsubscribes}

function match(pathname) {
  for (const [re, page, names] of ROUTES) {
    const m = re.exec(pathname);
    if (m) {
      const params = {};
      try {
        names.forEach((name, i) => { if (m[i + 1] !== undefined) params[name] = decodeURIComponent(m[i + 1]); });
      } catch {
        return null; // a broken %-escape names nothing
      }
      return { page, params };
    }
  }
  return null;
}

function leave() {
  delete document.getElementById("main").dataset.ready;
  markFresh();
  if (!current) return;
  current.controller.abort();
  for (const off of current.unsubscribes) off();
  current = null;
}

/** Runs refresh() now and again after every event that match(event) accepts: at once after a
 * quiet spell (an event shows without delay), never two at once, and while events keep coming
 * at most one run per gap — twice as long as the last run took, 50 ms at least, a second at
 * most — so a cheap page stays quick on a busy node and a costly one spends at most a third of
 * its time re-reading. A burst of events costs one more run, not one per event. A refresh that
 * fails once the page has drawn throws: the page keeps what it shows, marked stale. */
const MIN_GAP_MS = 50;
const MAX_GAP_MS = 1000;

function liveRefresher(state, signal) {
  return (matchEvent, refresh) => {
    let running = false, again = false, lastStart = -Infinity, gap = MIN_GAP_MS, timer = null;
    const run = async () => {
      if (signal.aborted) return;
      if (running || timer) { again = true; return; }
      const wait = lastStart + gap - performance.now();
      if (wait > 0) {
        timer = setTimeout(() => { timer = null; run(); }, wait);
        return;
      }
      running = true;
      again = false;
      lastStart = performance.now();
      // A page draws its own first-load errors; what it throws is a failure after it has drawn,
      // and then it keeps its data on screen under the stale notice.
      try {
        await refresh();
        if (!signal.aborted) markFresh();
      } catch (err) {
        if (err.name !== "AbortError" && !signal.aborted) {
          if (!(err instanceof ApiError)) console.error(err); // a bug, not the agent: the console says where
          markStale(err);
        }
      } finally {
        running = false;
        gap = Math.min(MAX_GAP_MS, Math.max(MIN_GAP_MS, 2 * (performance.now() - lastStart)));
      }
      if (again && !signal.aborted) run();
    };
    signal.addEventListener("abort", () => clearTimeout(timer));
    state.unsubscribes.push(onEvent((event) => { if (matchEvent(event)) run(); }));
    window.addEventListener("yurt:token", run, { signal });
    window.addEventListener("yurt:resync", run, { signal });
    return run();
  };
}

async function route() {
  leave();
  const view = document.getElementById("main");
  const found = match(location.pathname);
  for (const a of document.querySelectorAll("header nav a")) {
    if (found && a.dataset.nav === NAV[found.page]) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!found) {
    document.title = "Not found · yurt";
    replace(view, h("h1", null, "Not found"),
      h("p", null, "Nothing lives at ", h("code", null, location.pathname), ". ",
        h("a", { href: "/ui/jobs" }, "See the jobs"), "."));
    return;
  }
  const controller = new AbortController();
  const state = { controller, unsubscribes: [] };
  current = state;
  const ctx = {
    signal: controller.signal,
    live: liveRefresher(state, controller.signal),
    title: (text) => { document.title = `${text} · yurt`; },
    onEvent: (fn) => state.unsubscribes.push(onEvent(fn)),
  };
  try {
    const module = await import(`./pages/${found.page}.js`);
    if (controller.signal.aborted) return;
    replace(view);
    await module.default(view, found.params, ctx);
    // The page has drawn its first data: what ./scripts/bench_ui and the tests wait for.
    if (!controller.signal.aborted) {
      performance.mark("yurt:page-ready");
      view.dataset.ready = found.page;
    }
  } catch (err) {
    if (err.name === "AbortError" || controller.signal.aborted) return;
    console.error(err);
    replace(view, h("h1", null, "Something went wrong"), errorBox(err));
  }
}

function navigate(href) {
  history.pushState(null, "", href);
  route().then(() => {
    const main = document.getElementById("main");
    if (main && document.activeElement === document.body) main.focus({ preventScroll: true });
  });
  window.scrollTo(0, 0);
}

document.addEventListener("click", (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest("a[href]");
  if (!a || a.target || a.origin !== location.origin || !a.pathname.startsWith("/ui/")) return;
  // A link within this page (the skip link): the browser moves there and the focus with it.
  if (a.hash && a.pathname === location.pathname && a.search === location.search) return;
  if (a.pathname.startsWith("/ui/assets/")) return;
  e.preventDefault();
  navigate(a.pathname + a.search + a.hash);
});

window.addEventListener("popstate", route);
window.addEventListener("yurt:navigate", (e) => navigate(e.detail));

const LIVE_TITLES = {
  denied: "The agent refused this tab's token: use the Token button",
  forbidden: "This tab's token may not read the event stream: the page does not update by itself",
};

window.addEventListener("yurt:live", (e) => {
  const el = document.getElementById("live");
  el.className = `live ${e.detail}`;
  el.textContent = { on: "live", off: "offline", denied: "token needed", forbidden: "no live updates" }[e.detail] || "connecting";
  el.title = LIVE_TITLES[e.detail] || "Live updates";
});

/** Who this tab is signed in as, beside the Token button: the token's Name when the agent has
 * ACLs and the tab a valid token; nothing otherwise. */
async function drawWhoami() {
  const el = document.getElementById("whoami");
  const t = token();
  const who = t ? await identify(t) : { state: "none" };
  if (token() !== t) return; // changed meanwhile: the newer call draws
  if (who.state !== "token") {
    el.hidden = true;
    replace(el);
    return;
  }
  const tok = who.token;
  const name = tok.Name || "an unnamed token";
  const what = [tok.Type === "management" ? "management token" : "client token",
    tok.AccessorID ? `accessor ${tok.AccessorID}` : null].filter(Boolean).join(", ");
  replace(el,
    h("span", { class: "who", title: what }, "Signed in as ", h("strong", { "data-role": "token-name" }, name)),
    h("button", { type: "button", class: "ghost small", "data-role": "sign-out", onclick: () => {
      setToken("");
      toast("Signed out: this tab keeps no token", "ok");
    } }, "Sign out"));
  el.hidden = false;
}

document.getElementById("token-button").addEventListener("click", () => editToken());

/** A one-time sign-in link: the secret is out of the address before any await (a reload or a
 * bookmark never carries it), then traded for the token; a failed trade says why in the token
 * dialog, over the page, which loads with whatever token the tab had. */
async function signInFromLink() {
  const secret = takeOneTimeSecret();
  if (!secret) return;
  try {
    await exchangeOneTimeSecret(secret);
  } catch (err) {
    editToken(err.remedy ? [err.message, " ", h("code", { class: "nowrap" }, err.remedy), "."] : err.message);
  }
}

async function start() {
  await signInFromLink();
  window.addEventListener("yurt:token", () => { connectEvents(); drawWhoami(); });
  connectEvents();
  drawWhoami();
  route();
}

start();
