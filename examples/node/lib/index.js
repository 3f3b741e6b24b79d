// The zsched Node.js client: enqueue, cancel and inspect runs; consume them with Worker.
export * from './client.js';
export * from './envelope.js';
export * from './keys.js';
export { luaDir, runScript, script } from './scripts.js';
export { Worker } from './worker.js';
