import net, { type AddressInfo } from 'node:net';
import t from 'tap';
import { openDatabase } from '../../src/db/database.js';

/** A local port nothing listens on: one the OS just handed out, closed again. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

t.test('a server open that cannot connect rejects and leaves no pool behind', async (t) => {
  const port = await closedPort();
  // A pool left open keeps its timers (tarn's reaping interval); sockets and servers being closed
  // leave the list on a later turn of the loop, so only the timers are compared.
  const timers = () => process.getActiveResourcesInfo().filter((resource) => resource === 'Timeout').length;
  const before = timers();
  for (const readOnly of [false, true]) {
    await t.rejects(openDatabase({ kind: 'postgres', url: `postgres://postgres@127.0.0.1:${port}/postgres`, maxConns: 2, readOnly }), { code: 'ECONNREFUSED' });
  }
  t.equal(timers(), before, 'nothing left running: the failed opens destroyed their pools');
});
