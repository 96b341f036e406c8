// Builds the test host (host.html + host.ts, with the SDK's AppBridge) into one file.
//   node build.mjs outDir      (toolchain: .tools/views, tests/views/install.sh)
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const MODULES = join(resolve(HERE, "../../.."), ".tools/views/node_modules");
const load = (file) => import(pathToFileURL(join(MODULES, file)).href);
const { build } = await load("vite/dist/node/index.js");
const { viteSingleFile } = await load("vite-plugin-singlefile/dist/esm/index.js");
const bridge = "@modelcontextprotocol/ext-apps/dist/src/app-bridge.js";

await build({
  root: HERE,
  configFile: false,
  logLevel: "warn",
  resolve: { alias: { "@modelcontextprotocol/ext-apps/app-bridge": join(MODULES, bridge) } },
  plugins: [viteSingleFile()],
  build: { outDir: resolve(process.argv[2]), emptyOutDir: true, rollupOptions: { input: join(HERE, "host.html") } },
});
