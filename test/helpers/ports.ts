import net, { type Socket } from 'node:net';

/** What refusingPort needs of a test: a teardown. */
interface TearsDown {
  teardown(fn: () => void | Promise<void>): void;
}

/**
 * A local port that refuses connections (ECONNREFUSED) until the test ends, and that no other
 * process can take meanwhile. A port found by listening and closing again was free for anyone:
 * other engineers' tests run on this machine, and one could listen there before the test
 * connected. This port is the local end of a connection the test holds open (to a server of its
 * own): bound, so nobody can bind it (EADDRINUSE, SO_REUSEADDR or not), and with no listener,
 * so a connection to it is refused.
 */
export async function refusingPort(t: TearsDown): Promise<number> {
  const accepted = new Set<Socket>();
  const server = net.createServer((socket) => {
    accepted.add(socket);
    socket.on('close', () => accepted.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port: serverPort } = server.address() as net.AddressInfo;
  const holder = net.connect(serverPort, '127.0.0.1');
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        holder.destroy();
        for (const socket of accepted) socket.destroy();
        server.close(() => resolve());
      }),
  );
  await new Promise<void>((resolve, reject) => {
    holder.once('connect', resolve);
    holder.once('error', reject);
  });
  if (holder.localPort === undefined) throw new Error('the held connection has no local port');
  return holder.localPort;
}
