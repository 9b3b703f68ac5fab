// The CJS build lives under a package marked "type": "commonjs" so Node (and TypeScript's
// resolution of dist/cjs/*.d.ts) read it as CommonJS while the package root is ESM.
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
writeFileSync(join(here, "../dist/cjs/package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
