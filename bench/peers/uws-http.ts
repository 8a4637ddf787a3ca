/**
 * The HTTP peer on bare uWebSockets.js, serving face-read.ts. Against
 * node-http.ts it compares the socket libraries; against the service it
 * isolates the cost of our request pipeline (router, limiter, request id,
 * abort signal, per-request logger, zod, error mapping).
 *
 *   PORT=… DATABASE_URL=… FACE_TOKEN=… node dist/bench/peers/uws-http.js
 */
import { STATUS_CODES } from 'node:http';
import uWS from 'uWebSockets.js';
import { openFaceReader } from './face-read.js';

const reader = openFaceReader();

const app = uWS.App();
app.any('/*', (res, req) => {
  // uWS's request object dies when this function returns: copy what the handler needs first.
  const method = req.getMethod().toUpperCase();
  const path = req.getUrl();
  const authorization = req.getHeader('authorization');
  const host = req.getHeader('host');
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });
  void reader.answer(method, path, authorization, host).then(({ status, body }) => {
    if (aborted) return;
    const text = JSON.stringify(body);
    res.cork(() => {
      res.writeStatus(`${status} ${STATUS_CODES[status]}`).writeHeader('Content-Type', 'application/json').end(text);
    });
  });
});
let listen: uWS.us_listen_socket | false = false;
app.listen('127.0.0.1', Number(process.env.PORT ?? 0), (s) => {
  listen = s;
  if (!s) process.exit(1);
});
const stop = () => {
  if (listen) uWS.us_listen_socket_close(listen);
  app.close();
  void reader.close().then(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
