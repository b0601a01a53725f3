import { mkdtempSync, rmSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import t, { type Test } from 'tap';
import { buildConfig, trustConfiguredCertificates } from '../../src/config/index.js';
import { openDatabase, type PostgresSslMode } from '../../src/db/database.js';
import { certificateAuthority, hasOpenssl } from '../helpers/certificates.js';

// ssl_mode against a real TLS endpoint: a server that answers PostgreSQL's SSLRequest with 'S',
// shakes hands with a certificate for other.example signed by a test CA, and ends the session
// with an ErrorResponse to the startup message (so getting that error means the handshake passed).

const SSL_REQUEST_CODE = 80877103;
const AFTER_HANDSHAKE = 'the test server ends the session after the handshake';

/** A PostgreSQL ErrorResponse (severity, code, message) for the client to report. */
function errorResponse(message: string): Buffer {
  const fields = Buffer.from(`SFATAL\0C08006\0M${message}\0\0`);
  const header = Buffer.alloc(5);
  header.write('E', 0);
  header.writeInt32BE(4 + fields.length, 1);
  return Buffer.concat([header, fields]);
}

/** The TLS endpoint; `handshakes` counts the sessions whose handshake completed. */
async function tlsEndpoint(t: Test, certificate: { key: string; cert: string }): Promise<{ port: number; handshakes: () => number }> {
  let handshakes = 0;
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined);
    socket.once('data', (request) => {
      if (request.length !== 8 || request.readInt32BE(4) !== SSL_REQUEST_CODE) return void socket.destroy();
      socket.write('S');
      const secure = new tls.TLSSocket(socket, { isServer: true, key: certificate.key, cert: certificate.cert });
      secure.on('error', () => undefined);
      secure.once('secure', () => handshakes++);
      secure.once('data', () => secure.end(errorResponse(AFTER_HANDSHAKE)));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as AddressInfo).port, handshakes: () => handshakes };
}

async function connectWith(sslMode: PostgresSslMode, port: number): Promise<unknown> {
  // Only 127.0.0.1 listens: the host name is what verify-full compares with the certificate's.
  const url = `postgres://factlog@localhost:${port}/factlog`;
  try {
    const db = await openDatabase({ kind: 'postgres', url, maxConns: 1, sslMode });
    await db.close();
    return null;
  } catch (error) {
    return error;
  }
}

t.test('ssl_mode against a TLS server whose certificate is for another host name', { skip: hasOpenssl() ? false : 'no openssl CLI to make the certificates' }, async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'factlog-tls-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const trusted = certificateAuthority(dir, 'Factlog test CA', 'other.example');
  const untrusted = certificateAuthority(dir, 'Unknown CA', 'other.example');
  // A deployment's tls.ca_file (or NODE_EXTRA_CA_CERTS): the test CA joins the CAs Node trusts.
  const defaultCAs = tls.getCACertificates('default');
  t.teardown(() => tls.setDefaultCACertificates(defaultCAs));
  trustConfiguredCertificates(buildConfig({ tls: { ca_file: trusted.caFile } }), process.cwd());

  const endpoint = await tlsEndpoint(t, trusted);
  const fromUntrusted = await tlsEndpoint(t, untrusted);

  const full = await connectWith('verify-full', endpoint.port);
  t.match(full, { code: 'ERR_TLS_CERT_ALTNAME_INVALID' }, 'verify-full refuses the host name');
  t.match(String((full as Error).message), /certificate is not for localhost \(ssl_mode verify-full checks the host name; verify-ca checks only the CA\).*other\.example/, 'and says why and which setting');

  const ca = await connectWith('verify-ca', endpoint.port);
  t.match(String((ca as Error).message), AFTER_HANDSHAKE, 'verify-ca gets past the handshake: the server answered the startup message');
  t.equal(endpoint.handshakes(), 1, 'one completed handshake, verify-ca\'s');

  const caUnknown = await connectWith('verify-ca', fromUntrusted.port);
  t.match(caUnknown, { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' }, 'verify-ca still refuses a certificate no trusted CA signed');

  const encryptedOnly = await connectWith('require', fromUntrusted.port);
  t.match(String((encryptedOnly as Error).message), AFTER_HANDSHAKE, 'require encrypts and checks no certificate');
  t.equal(fromUntrusted.handshakes(), 1, 'require\'s handshake completed, verify-ca\'s did not');
});
