// /ui/settings/tokens (Nomad's UI path): the token this tab sends, set, checked or forgotten.
// The token lives in this tab's session storage only (session.js); checking it asks the agent
// who the token is (GET /v1/acl/token/self, which every valid token may read): with ACLs, its
// name, type and policies; without, whether the agent takes it.

import { h, replace, setToken, timeEl, toast, token } from "../lib.js";
import { identify } from "../session.js";

export default async function mount(view, params, ctx) {
  ctx.title("Token");
  const input = h("input", { type: "password", id: "settings-token", name: "token", autocomplete: "off",
    placeholder: "X-Nomad-Token", "aria-describedby": "token-help" });
  const verdict = h("div", { id: "token-verdict", role: "status" });
  const check = async () => {
    replace(verdict, "Checking…");
    // A refusal here should say so on this page, not open the token dialog over it.
    const who = await identify(token());
    if (ctx.signal.aborted) return;
    if (who.state === "token") {
      const tok = who.token;
      replace(verdict, h("p", null, h("span", { class: "badge s-running" }, "accepted"), " Signed in as ",
        h("strong", { "data-role": "token-name" }, tok.Name || "an unnamed token"),
        ` (${tok.Type === "management" ? "management" : "client"} token).`),
      h("dl", { class: "kv token-facts" },
        h("dt", null, "Accessor"), h("dd", { class: "id" }, tok.AccessorID || "–"),
        tok.Type !== "management" ? [h("dt", null, "Policies"),
          h("dd", null, (tok.Policies || []).join(", ") || h("span", { class: "muted" }, "none")),
          (tok.Roles || []).length ? [h("dt", null, "Roles"),
            h("dd", null, tok.Roles.map((r) => r.Name || r.ID).join(", "))] : null] : null,
        h("dt", null, "Expires"), h("dd", null, tok.ExpirationTime ? timeEl(tok.ExpirationTime) : "never")));
    } else if (who.state === "open") {
      replace(verdict, h("p", null, h("span", { class: "badge s-running" }, "accepted"), " ",
        token() ? "The agent accepts this tab's token." : "The agent needs no token."));
    } else if (who.state === "refused") {
      replace(verdict, h("p", null, h("span", { class: "badge s-failed" }, "refused"), " ",
        token() ? `The agent refuses this tab's token (${who.reason || "403"}).`
          : `The agent needs a token (${who.reason || "403"}).`));
    } else {
      replace(verdict, h("p", null, h("span", { class: "badge s-failed" }, "unknown"), " ",
        `Could not check the token: ${who.reason}.`));
    }
  };
  const form = h("form", { class: "token-form", onsubmit: async (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    input.value = "";
    toast(token() ? "Token kept for this tab" : "Token forgotten", "ok"); // yurt:token redraws
  } },
  h("label", { for: "settings-token" }, "Token"), input,
  h("div", { class: "actions" },
    h("button", { type: "submit", class: "primary", "data-role": "save-token" }, "Save"),
    h("button", { type: "button", "data-role": "forget-token", onclick: () => {
      setToken("");
      toast("Token forgotten", "ok");
    } }, "Forget")));
  const state = h("p", { id: "token-state" });
  const draw = () => replace(state, token()
    ? `This tab keeps a token ending in …${token().slice(-4)}.` : "This tab keeps no token.");
  replace(view,
    h("h1", null, "Token"),
    h("p", { id: "token-help", class: "muted" },
      "An agent with ACLs answers each request as its token's policies allow; one started with ",
      "--token-file answers only requests that carry its token. The token is sent as X-Nomad-Token ",
      "and kept in this tab's session storage: it is gone when the tab closes, and never sent anywhere else. ",
      h("code", null, "yurt ui -authenticate"), " opens this UI signed in with your CLI token, through a link that works once."),
    state, form, verdict);
  draw();
  // Another tab's sign-out, the header's, or a sign-in link: the page shows the token kept now.
  window.addEventListener("yurt:token", () => { draw(); check(); }, { signal: ctx.signal });
  await check();
}
