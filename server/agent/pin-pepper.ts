/**
 * Where the PIN pepper comes from (credentials.ts says why there is one): PIN_PEPPER,
 * kept outside the database like any other secret. Only on the local network profile may it
 * be missing: then one is generated once and kept in PIN_PEPPER_FILE, so links survive a
 * restart. On any other profile the service refuses to start without it
 * (startup-checks.ts), and this refuses too, in case anything builds a hub regardless.
 */
import { randomBytes } from "node:crypto";
import { linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { NetworkProfile } from "../../lib/networks.ts";
import type { Config } from "../config.ts";
import { MIN_PEPPER_BYTES } from "../credentials.ts";

export function pinPepper(config: Pick<Config, "PIN_PEPPER" | "PIN_PEPPER_FILE">, network: Pick<NetworkProfile, "local" | "name">): Buffer {
  if (config.PIN_PEPPER) return Buffer.from(config.PIN_PEPPER, "utf8");
  if (!network.local) throw new Error(`PIN_PEPPER is required on the network profile "${network.name}" (only the local one generates its own)`);
  return localPepper(config.PIN_PEPPER_FILE);
}

/** The local stack's pepper: read from `file`, or made and written there once (atomically: a partial one is never read). */
export function localPepper(file: string): Buffer {
  try {
    return fromFile(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  mkdirSync(dirname(file), { recursive: true });
  const temp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}`;
  writeFileSync(temp, `${randomBytes(MIN_PEPPER_BYTES).toString("hex")}\n`, { mode: 0o600 });
  try {
    linkSync(temp, file); // fails if another process made it first: then theirs is used
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  } finally {
    unlinkSync(temp);
  }
  return fromFile(file);
}

function fromFile(file: string): Buffer {
  const pepper = Buffer.from(readFileSync(file, "utf8").trim(), "utf8");
  if (pepper.length < MIN_PEPPER_BYTES) throw new Error(`${file} holds a PIN pepper shorter than ${MIN_PEPPER_BYTES} bytes`);
  return pepper;
}
