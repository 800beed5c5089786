// A real OpenID provider for the console's SSO test: `oidc-provider` (the certified Node.js
// implementation) with its development login form. The test starts it as
//   PORT=<port> REDIRECT_URI=<console callback> TENANT=<tenant id> node provider.mjs
// Accounts: the login names the role (`manager@…`, `auditor@…`, anything else is a developer).
// `GET /__mode?m=wrong-aud|expired|normal` makes the token endpoint re-sign the ID token it
// issues with another audience or an expiry in the past (same key), so the console's refusal of
// each can be seen through a real sign-in.
import Provider from "oidc-provider";
import * as jose from "jose";

const port = Number(process.env.PORT);
const issuer = `http://localhost:${port}`;
const { privateKey } = await jose.generateKeyPair("RS256", { extractable: true });
const jwk = { ...(await jose.exportJWK(privateKey)), kid: "test", alg: "RS256", use: "sig" };
let mode = "normal";

const role = (sub) => (sub.startsWith("manager") ? "manager" : sub.startsWith("auditor") ? "auditor" : "developer");
const provider = new Provider(issuer, {
  clients: [{
    client_id: "tollgate-console",
    client_secret: "console-secret",
    redirect_uris: [process.env.REDIRECT_URI],
    grant_types: ["authorization_code"],
    response_types: ["code"],
  }],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  conformIdTokenClaims: false,
  claims: { openid: ["sub", "tenant", "role"] },
  findAccount: async (_ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, tenant: process.env.TENANT, role: role(sub) }),
  }),
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ["console-test-only"] },
});

provider.use(async (ctx, next) => {
  if (ctx.path === "/__mode") {
    mode = ctx.query.m;
    ctx.body = `mode ${mode}\n`;
    return;
  }
  await next();
  if (ctx.path === "/token" && mode !== "normal" && ctx.body && ctx.body.id_token) {
    const claims = jose.decodeJwt(ctx.body.id_token);
    const now = Math.floor(Date.now() / 1000);
    if (mode === "wrong-aud") claims.aud = "some-other-client";
    if (mode === "expired") { claims.iat = now - 7200; claims.exp = now - 3600; }
    const idToken = await new jose.SignJWT(claims).setProtectedHeader({ alg: "RS256", kid: "test", typ: "JWT" }).sign(privateKey);
    ctx.body = { ...ctx.body, id_token: idToken };
  }
});

provider.listen(port, () => console.log(`ready ${issuer}`));
