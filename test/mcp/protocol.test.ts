import t from 'tap';
import { checkRequestMetadata, replyFormat, requestedVersion, versionBridge } from '../../src/mcp/protocol.js';

t.test('replyFormat follows the client preference', async (t) => {
  t.equal(replyFormat(undefined), 'json');
  t.equal(replyFormat('application/json, text/event-stream'), 'json');
  t.equal(replyFormat('text/event-stream, application/json'), 'sse');
  t.equal(replyFormat('application/json;q=0.9, text/event-stream;q=1'), 'sse');
  t.equal(replyFormat('text/event-stream;q=0, application/json;q=0.1'), 'json', 'q=0 refuses a type');
  t.equal(replyFormat('Text/Event-Stream'), 'sse', 'case-insensitive');
  t.equal(replyFormat('application/*'), 'json');
  t.equal(replyFormat('text/html, image/png'), null);
  t.equal(replyFormat('text/event-stream;q=abc'), null, 'a malformed q-value counts as no preference for it');
});

t.test('requestedVersion', async (t) => {
  t.same(requestedVersion(undefined), { version: null });
  t.same(requestedVersion('2026-07-28'), { version: '2026-07-28' });
  t.same(requestedVersion('2025-06-18'), { version: '2025-06-18' });
  t.match(requestedVersion('2025-03-26'), { status: 400, body: { error: { code: -32022, data: { requested: '2025-03-26' } } } }, 'only the three revisions may be named');
});

t.test('checkRequestMetadata checks only what is sent', async (t) => {
  const message = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'getFact' } };
  t.equal(checkRequestMetadata([message], { version: undefined, method: undefined, name: undefined }), null);
  t.equal(checkRequestMetadata([message], { version: '2026-07-28', method: 'tools/call', name: 'getFact' }), null);
  t.match(checkRequestMetadata([message], { version: undefined, method: 'tools/list', name: undefined }), { status: 400, body: { id: 1, error: { code: -32020 } } });
  t.equal(checkRequestMetadata([{ ...message, method: 'tools/list' }], { version: undefined, method: 'tools/list', name: 'anything' }), null, 'Mcp-Name is checked on tools/call only');
});

t.test('versionBridge leaves older revisions alone and tells the SDK a version it knows', async (t) => {
  const messages = [{ jsonrpc: '2.0', id: 1, method: 'tools/list' }];
  const legacy = versionBridge(messages, '2025-06-18');
  t.equal(legacy.sdkVersionHeader, '2025-06-18');
  const response = { jsonrpc: '2.0' as const, id: 1, result: { tools: [] } };
  t.equal(legacy.rewrite(response), response);
  const modern = versionBridge(messages, '2026-07-28');
  t.equal(modern.sdkVersionHeader, '2025-11-25');
  t.match(modern.rewrite(response), { result: { tools: [], resultType: 'complete', cacheScope: 'private' } });
  const error = { jsonrpc: '2.0' as const, id: 1, error: { code: -32603, message: 'x' } };
  t.equal(modern.rewrite(error), error, 'errors pass unchanged');
  t.equal(versionBridge(messages, null).sdkVersionHeader, undefined);
});
