// Minting a ternflow token in a web app's backend (Node, no dependency): HS256 over the claims
// the server checks (docs/security.md). The secret is the base64 one in the server's
// TERNFLOW_JWT_KEYS entry `kid:hs256:<secret>`; keep it on the backend, never in the page.
//
//   TERNFLOW_JWT_SECRET=... node docs/recipes/mint-token.mjs k1 worker acme 600
import { createHmac } from "node:crypto";

export function mintToken({ kid, secret, role, tenant, ttlSecs = 600, sub }) {
  const now = Math.floor(Date.now() / 1000);
  const b64url = (s) => Buffer.from(s).toString("base64url");
  const header = b64url(JSON.stringify({ alg: "HS256", typ: "JWT", kid }));
  const claims = b64url(JSON.stringify({ role, tenant, iat: now, exp: now + ttlSecs, ...(sub ? { sub } : {}) }));
  const sig = createHmac("sha256", Buffer.from(secret, "base64")).update(`${header}.${claims}`).digest("base64url");
  return `${header}.${claims}.${sig}`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [kid, role, tenant, ttl] = process.argv.slice(2);
  console.log(mintToken({ kid, secret: process.env.TERNFLOW_JWT_SECRET, role, tenant, ttlSecs: Number(ttl ?? 600) }));
}
