import t from 'tap';
import { type Config, ConfigError, loadConfig, type LoadConfigOptions } from '../../src/config/index.js';

/** loadConfig isolated from the real environment and working directory. */
export function load(options: LoadConfigOptions = {}): Config {
  return loadConfig({ env: {}, writeDefaults: false, cwd: t.testdirName, ...options });
}

/** Runs `fn`, expects a ConfigError, returns its message. */
export function configErrorOf(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error.message;
    throw error;
  }
  throw new Error('expected a ConfigError, nothing was thrown');
}
