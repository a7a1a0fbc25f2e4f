// The TypeScript MCP SDK v1 client (protocol 2025-11-25) against `fs-notes serve` over stdio:
// list, read, then notes_delete answered through the SDK's elicitation handler.
// Usage: node delete_flow.mjs PYTHON REPO WORKSPACE REPLAY_DB ACTION   (ACTION: accept|decline)
// Prints one JSON object on stdout: what the client saw, and every message the server sent.
import { pathToFileURL } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [python, repo, workspace, replayDb, action] = process.argv.slice(2);
const uri = pathToFileURL(workspace).href;

const transport = new StdioClientTransport({
  command: python,
  args: ['-m', 'fs_notes', 'serve', workspace, '--replay-db', replayDb],
  cwd: repo,
  env: { ...process.env, PYTHONPATH: repo },
  stderr: 'inherit',
});
let protocolVersion = null;
transport.setProtocolVersion = (version) => { protocolVersion = version; };
const received = [];
const start = transport.start.bind(transport);
transport.start = async () => {
  const inner = transport.onmessage;
  transport.onmessage = (message, extra) => { received.push(message); inner(message, extra); };
  return start();
};

const client = new Client(
  { name: 'fs-notes-ts-test', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } } },
);
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  const note = request.params.requestedSchema.properties.note_id.oneOf[0].const;
  if (action === 'accept') {
    return { action: 'accept', content: { note_id: note, confirm: true } };
  }
  return { action };
});

await client.connect(transport);
const tools = await client.listTools();
const listed = await client.callTool({ name: 'notes_list', arguments: { workspaceUri: uri } });
const read = await client.callTool({
  name: 'notes_read',
  arguments: { workspaceUri: uri, id: 'tps.md' },
});
const escape = await client.callTool({
  name: 'notes_read',
  arguments: { workspaceUri: uri, id: '../secret.md' },
});
const resources = await client.listResources();
const deleted = await client.callTool({
  name: 'notes_delete',
  arguments: { workspaceUri: uri, title: 'TPS report' },
});
await client.close();
process.stdout.write(JSON.stringify({
  protocolVersion,
  serverInfo: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  listed: listed.structuredContent,
  read: read.structuredContent,
  escape,
  resources: resources.resources.map((r) => r.name),
  deleted,
  asked,
  received,
}) + '\n');
