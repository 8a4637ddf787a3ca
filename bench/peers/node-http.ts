/**
 * The HTTP peer on plain node:http, serving face-read.ts. Against the service
 * it measures uWebSockets.js + our request pipeline against node:http.
 *
 *   PORT=… DATABASE_URL=… FACE_TOKEN=… node dist/bench/peers/node-http.js
 */
import http from 'node:http';
import { openFaceReader } from './face-read.js';

const reader = openFaceReader();

const server = http.createServer((req, res) => {
  void reader.answer(req.method ?? 'GET', req.url ?? '', req.headers.authorization, req.headers.host).then(({ status, body }) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  });
});
server.keepAliveTimeout = 10_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const stop = () => server.close(() => void reader.close().then(() => process.exit(0)));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
