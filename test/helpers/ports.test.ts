import { execFile } from 'node:child_process';
import net from 'node:net';
import { promisify } from 'node:util';
import t from 'tap';
import { refusingPort } from './ports.js';

const connectOutcome = (port: number) =>
  new Promise<string>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve('connected')));
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });

t.test('a refusing port refuses connections and cannot be taken by another process until the test ends', async (t) => {
  const port = await refusingPort(t);
  t.equal(await connectOutcome(port), 'ECONNREFUSED');
  // Another process, as another engineer's test would: Node's servers set SO_REUSEADDR.
  const listen = `require('node:net').createServer().listen(${port}, '127.0.0.1', () => { console.log('listening'); process.exit(0); }).on('error', (error) => { console.log(error.code); process.exit(0); })`;
  const { stdout } = await promisify(execFile)(process.execPath, ['-e', listen]);
  t.equal(stdout.trim(), 'EADDRINUSE');
  t.equal(await connectOutcome(port), 'ECONNREFUSED', 'still refused');
});
