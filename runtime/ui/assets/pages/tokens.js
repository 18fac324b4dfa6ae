// /ui/settings/tokens (Nomad's UI path): the token this tab sends, set, checked or forgotten.
// The token lives in this tab's session storage only (lib.js); checking it asks the agent for
// something every token may read, /v1/agent/self.

import { ApiError, describe, h, replace, setToken, toast, token } from "../lib.js";

export default async function mount(view, params, ctx) {
  ctx.title("Token");
  const input = h("input", { type: "password", id: "settings-token", name: "token", autocomplete: "off",
    placeholder: "X-Nomad-Token", "aria-describedby": "token-help" });
  const verdict = h("p", { id: "token-verdict", role: "status" });
  const check = async () => {
    replace(verdict, "Checking…");
    try {
      // A refusal here should say so on this page, not open the token dialog over it.
      const headers = token() ? { "X-Nomad-Token": token() } : {};
      const response = await fetch("/v1/agent/self", { headers, signal: ctx.signal });
      if (response.status === 403) throw new ApiError(403, "the agent refuses this token", "/v1/agent/self");
      if (!response.ok) throw new ApiError(response.status, (await response.text()).trim(), "/v1/agent/self");
      replace(verdict, h("span", { class: "badge s-running" }, "accepted"), " ",
        token() ? "The agent accepts this tab's token." : "The agent needs no token.");
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(verdict, h("span", { class: "badge s-failed" }, "refused"), " ", describe(err));
    }
  };
  const form = h("form", { class: "token-form", onsubmit: async (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    input.value = "";
    toast(token() ? "Token kept for this tab" : "Token forgotten", "ok");
    draw();
    await check();
  } },
  h("label", { for: "settings-token" }, "Token"), input,
  h("div", { class: "actions" },
    h("button", { type: "submit", class: "primary", "data-role": "save-token" }, "Save"),
    h("button", { type: "button", "data-role": "forget-token", onclick: async () => {
      setToken("");
      toast("Token forgotten", "ok");
      draw();
      await check();
    } }, "Forget")));
  const state = h("p", { id: "token-state" });
  const draw = () => replace(state, token()
    ? `This tab keeps a token ending in …${token().slice(-4)}.` : "This tab keeps no token.");
  replace(view,
    h("h1", null, "Token"),
    h("p", { id: "token-help", class: "muted" },
      "An agent started with --token-file answers only requests that carry its token as X-Nomad-Token. ",
      "The token is kept in this tab's session storage: it is gone when the tab closes, and never sent anywhere else."),
    state, form, verdict);
  draw();
  await check();
}
