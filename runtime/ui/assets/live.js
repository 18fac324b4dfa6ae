// The one event socket of the page (/v1/event/ws): opened at start and again with every new
// token (app.js), its records handed to the pages' listeners (lib.js `deliver`, `onEvent`),
// reconnected with a growing delay when it drops, and every page told to read its state again
// after a gap. The token rides in a subprotocol (`x-nomad-token.<base64url>`: a browser cannot
// set headers on a websocket). Closed with 1008, it is a refusal: a token refused is asked for;
// a valid token refused the topics asked for is offered narrower ones (`SUBSCRIPTIONS`) and,
// refused them all, the page lives without updates ("forbidden"), asking nothing.

import { api, askToken, deliver, refusalReason, setLive } from "./lib.js";
import { secretRefused, token } from "./session.js";

let socket = null;
let retry = 0; // reconnects since the socket was last open

function b64url(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

let everOpened = false;

/** What the socket subscribes to, widest first. Every topic is a management token's only
 * (runtime/api/events.py `_subscription_allowed`, Nomad's `validateACL`: each topic asked for,
 * in the namespace asked for, `*` meaning every namespace); a token refused one is offered the
 * next, so a reader of jobs still hears of them. */
const JOB_TOPICS = "topic=Job&topic=Evaluation&topic=Allocation&topic=Deployment&topic=Task";
const SUBSCRIPTIONS = [
  "topic=*",
  `${JOB_TOPICS}&topic=Node&namespace=*`,
  `${JOB_TOPICS}&namespace=*`,
  `${JOB_TOPICS}&topic=Node&namespace=default`,
  `${JOB_TOPICS}&namespace=default`,
  "topic=Node",
];
let subscription = { token: null, at: 0 }; // the widest one the token was not refused

export function connectEvents() {
  if (socket) { socket.onclose = null; socket.close(); }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const protocols = ["yurt-events"];
  const t = token();
  if (t) protocols.push("x-nomad-token." + b64url(t));
  if (subscription.token !== t) subscription = { token: t, at: 0 };
  const tier = subscription.at;
  // index=0 would replay everything kept; a page loads its state over HTTP and needs only news.
  const ws = new WebSocket(`${scheme}//${location.host}/v1/event/ws?${SUBSCRIPTIONS[tier]}`, protocols);
  socket = ws;
  ws.onopen = () => {
    retry = 0;
    setLive("on");
    // Whatever happened while the socket was down reached no page: each reads its state again.
    if (everOpened) resync();
    everOpened = true;
  };
  ws.onmessage = (message) => {
    let record;
    try { record = JSON.parse(message.data); } catch { return; }
    if (record.Lost) resync(); // the agent dropped events this page was too slow to take
    deliver(record);
  };
  ws.onclose = (close) => {
    if (socket !== ws) return;
    setLive("off");
    if (close.code === 1008) {
      // Refused: a token missing or wrong is asked for; a valid one that may not read the
      // events is told so, and the page lives without them. A new token reconnects (app.js).
      secretRefused(t, close.reason).then((refused) => {
        if (socket !== ws || token() !== t) return;
        if (!refused && tier + 1 < SUBSCRIPTIONS.length) {
          subscription = { token: t, at: tier + 1 }; // a narrower subscription, at once
          connectEvents();
          return;
        }
        setLive(refused ? "denied" : "forbidden");
        if (refused) askToken(refusalReason(t, close.reason));
      });
      return;
    }
    // Down, restarting, or refused before the upgrade (a browser sees no reason then): one
    // plain request tells a refused token (it asks for it) from an agent away (it fails).
    if (retry === 1) api.get("/v1/agent/self").catch(() => {});
    const delay = Math.min(5000, 250 * 2 ** retry++);
    setTimeout(() => { if (socket === ws) connectEvents(); }, delay);
  };
}

function resync() {
  window.dispatchEvent(new CustomEvent("yurt:resync"));
}
