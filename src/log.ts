/**
 * Structured JSON logs on stdout.
 *
 * Uploads, photo URLs' query strings and tokens never reach a log line: request
 * logging records method, route pattern, status and timing only, and the
 * redaction list below catches the header should a caller log one by mistake.
 */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
    level,
    base: { service: 'face-service' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: ['authorization', 'headers.authorization', 'req.headers.authorization', 'token', '*.token'],
      censor: '[redacted]',
    },
  });
}

/** The process-wide logger; modules take a child of it rather than creating their own. */
export const log: Logger = createLogger();
