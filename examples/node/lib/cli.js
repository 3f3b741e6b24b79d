// Tiny argument parser shared by the command-line examples: --name value and --flag.
export function parseArgs(argv, { flags = [] } = {}) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}`);
    const name = a.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (flags.includes(name)) out[name] = true;
    else if (i + 1 < argv.length) out[name] = argv[++i];
    else throw new Error(`${a} needs a value`);
  }
  return out;
}

export function intOrUndefined(value, name) {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new Error(`--${name} must be an integer, got ${value}`);
  return n;
}
