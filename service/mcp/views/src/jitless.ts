// Imported first by every view: the SDK's schema library then never tries `new Function`,
// which the hosts' CSP (no 'unsafe-eval') refuses.
const holder = globalThis as { __zod_globalConfig?: { jitless?: boolean } };
holder.__zod_globalConfig = { ...holder.__zod_globalConfig, jitless: true };
export {};
