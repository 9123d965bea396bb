// tsclient.mjs drives the keeper's /mcp with the official TypeScript SDK,
// as most MCP clients do: connect over streamable HTTP with a bearer
// header, list the tools (the SDK validates them against the MCP schema),
// call a few, and print what it saw as one JSON document.
//
//   node tsclient.mjs URL TOKEN
import {Client} from '@modelcontextprotocol/sdk/client/index.js';
import {StreamableHTTPClientTransport} from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token] = process.argv.slice(2);
const out = {tools: [], calls: {}};
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: {headers: {Authorization: 'Bearer ' + token}},
});
const client = new Client({name: 'soulstack-test', version: '1.0.0'});
try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  const {tools} = await client.listTools();
  out.tools = tools.map(t => t.name).sort();
  const call = async (name, args) => {
    const r = await client.callTool({name, arguments: args});
    out.calls[name + (r.isError ? ':error' : '')] = {
      isError: !!r.isError,
      text: (r.content || []).map(c => c.text || '').join(''),
      structured: r.structuredContent ?? null,
    };
  };
  await call('souls_list', {});
  await call('modules_list', {});
  await call('scenario_validate', {scenario: 'steps:\n  - name: a\n    on: x.test\n    module: core.command.ran\n    params: {cmd: "echo ${ input.nope }"}\n'});
  await call('soul_get', {sid: 42});
} catch (e) {
  out.error = String(e && e.stack || e);
} finally {
  await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(out.error ? 1 : 0);
