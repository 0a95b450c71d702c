// A real OpenID provider for the SSO tests: panva's certified `oidc-provider`, with its own users and groups.
//
// Environment: OIDC_PORT (listens on 127.0.0.1), OIDC_USERS_FILE (JSON: {"alice": {"password": "...",
// "email": "...", "name": "...", "groups": ["..."]}}, read again at every sign-in, so a test changes a
// user's groups by rewriting it), OIDC_CLIENTS (JSON: [{"client_id", "client_secret", "id_token_ttl"?}]).
// Any redirect URI on 127.0.0.1, localhost (or testserver) is allowed (the portal under test runs on a free port).
// Code flow with PKCE (S256, required), RS256 ID tokens carrying `groups`, signed with a key made at start.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";

import Provider from "oidc-provider";

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const clients = JSON.parse(process.env.OIDC_CLIENTS || "[]");
const users = () => JSON.parse(fs.readFileSync(process.env.OIDC_USERS_FILE, "utf8"));

const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: "jwk" }), kid: crypto.randomUUID(), alg: "RS256", use: "sig" };
const ttls = Object.fromEntries(clients.map((c) => [c.client_id, c.id_token_ttl || 3600]));
const SCOPES = "openid email profile groups";

const provider = new Provider(issuer, {
  clients: clients.map((c) => ({
    client_id: c.client_id,
    client_secret: c.client_secret,
    redirect_uris: ["http://127.0.0.1/callback"],
    post_logout_redirect_uris: ["http://127.0.0.1/"],
    grant_types: ["authorization_code"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_post",
  })),
  jwks: { keys: [jwk] },
  cookies: { keys: [crypto.randomBytes(16).toString("hex")] },
  pkce: { methods: ["S256"], required: () => true },
  scopes: ["openid", "email", "profile", "groups"],
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["name", "preferred_username"],
    groups: ["groups"],
  },
  conformIdTokenClaims: false,
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      async logoutSource(ctx, form) {
        ctx.body = `<!doctype html><title>Test IdP sign-out</title><h1>Sign out of the test IdP?</h1>${form}
<button type="submit" form="op.logoutForm" value="yes" name="logout" data-action="idp-sign-out">Sign out</button>`;
      },
    },
  },
  ttl: { IdToken: (ctx, token, client) => ttls[client.clientId] || 3600 },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, sub) {
    const user = users()[sub];
    if (!user) return undefined;
    return {
      accountId: sub,
      async claims() {
        return {
          sub,
          email: user.email || `${sub}@example.org`,
          email_verified: true,
          name: user.name || sub,
          preferred_username: sub,
          groups: user.groups || [],
        };
      },
    };
  },
  // First-party clients: no consent screen, every scope granted.
  async loadExistingGrant(ctx) {
    if (!ctx.oidc.session?.accountId) return undefined;
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope(SCOPES);
    await grant.save();
    return grant;
  },
});

const local = (value) => {
  try {
    const url = new URL(value);
    // testserver: Django's test client, whose callback a test opens itself.
    return url.protocol === "http:" && ["127.0.0.1", "localhost", "testserver"].includes(url.hostname);
  } catch {
    return false;
  }
};
provider.Client.prototype.redirectUriAllowed = local;
provider.Client.prototype.postLogoutRedirectUriAllowed = local;

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const loginForm = (uid, error = "") => `<!doctype html><title>Test IdP sign-in</title>
<h1>Test IdP</h1>${error ? `<p class="error">${escape(error)}</p>` : ""}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>Username <input name="login" autofocus></label>
<label>Password <input name="password" type="password"></label>
<button type="submit" data-action="idp-sign-in">Sign in</button></form>`;

const body = (req) =>
  new Promise((resolve, reject) => {
    let data = "";
    req.on("data", (chunk) => (data += chunk));
    req.on("end", () => resolve(new URLSearchParams(data)));
    req.on("error", reject);
  });

const html = (res, status, text) => {
  res.writeHead(status, { "content-type": "text/html; charset=utf-8" });
  res.end(text);
};

async function interaction(req, res, path) {
  const details = await provider.interactionDetails(req, res);
  if (req.method === "GET") return html(res, 200, loginForm(details.uid));
  if (path.endsWith("/login") && req.method === "POST") {
    const form = await body(req);
    const user = users()[form.get("login")];
    if (!user || user.password !== form.get("password")) {
      return html(res, 200, loginForm(details.uid, "wrong username or password"));
    }
    return provider.interactionFinished(
      req,
      res,
      { login: { accountId: form.get("login") } },
      { mergeWithLastSubmission: false },
    );
  }
  return html(res, 405, "method not allowed");
}

const callback = provider.callback();
http
  .createServer((req, res) => {
    const path = new URL(req.url, issuer).pathname;
    if (path.startsWith("/interaction/")) {
      interaction(req, res, path).catch((err) => html(res, 400, escape(err.message)));
      return;
    }
    callback(req, res);
  })
  .listen(port, "127.0.0.1", () => console.log(`oidc-provider listening on ${issuer}`));
