// A plain Next.js 16 app (Turbopack). `turbopack.root` only because the fixture shares its page
// with the other bundler fixtures one folder up; ternflow itself needs no setting.
import { fileURLToPath } from "node:url";

export default {
  turbopack: { root: fileURLToPath(new URL("..", import.meta.url)) },
  distDir: process.env.NEXT_DIST_DIR ?? ".next",
};
