import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Whether the openssl CLI is there to make test certificates. */
export function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * A CA and a server certificate it signed for `serverName`, made by the openssl CLI in `dir`;
 * `caFile` is the CA's PEM file there.
 */
export function certificateAuthority(dir: string, name: string, serverName: string): { ca: string; caFile: string; key: string; cert: string } {
  const file = (suffix: string) => path.join(dir, `${name}-${suffix}`);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  openssl('req', '-x509', ...ec, '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', '2', '-subj', `/CN=${name}`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  openssl('req', ...ec, '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', `/CN=${serverName}`);
  writeFileSync(file('server.ext'), `basicConstraints=CA:FALSE\nsubjectAltName=DNS:${serverName}\n`);
  openssl('x509', '-req', '-in', file('server.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-CAcreateserial',
    '-out', file('server.pem'), '-days', '2', '-extfile', file('server.ext'));
  return { ca: readFileSync(file('ca.pem'), 'utf8'), caFile: file('ca.pem'), key: readFileSync(file('server.key'), 'utf8'), cert: readFileSync(file('server.pem'), 'utf8') };
}
