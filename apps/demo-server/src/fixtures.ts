/**
 * The tools, prompts and resources the official conformance suite (0.2.0-alpha.12) calls, registered
 * THROUGH the adapter (`mrtr.registerTool` / `registerPrompt` / `registerResource`), so the suite exercises our sealing,
 * binding, single use and answer validation rather than a bypass.
 */
import type { McpServer, ServerNotifier } from '@modelcontextprotocol/server';
import { fromJsonSchema, ProtocolError, ResourceTemplate } from '@modelcontextprotocol/server';
import type { Mrtr } from '@mrtr/mcp-server';
import * as z from 'zod/v4';
import { samplingText, taskSleep } from './tools.js';

/** The official suite sends first-call answers: these fixtures opt in to pre-supplied answers (the demo's own tools do not). */
const PRESUPPLIED = { presupplied: 'accept' } as const;

/** 1×1 PNG and a minimal WAV, as used by the suite's reference server. */
export const TEST_IMAGE_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
export const TEST_AUDIO_BASE64 = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';

const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const NAME_FORM = {
  message: 'What is your name?',
  requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
} as const;

export interface FixtureDeps {
  mrtr: Mrtr;
  /** The handler's change-notification facade (HTTP only), for the list-changed triggers. */
  notifier(): ServerNotifier | undefined;
}

export function registerConformanceFixtures(server: McpServer, { mrtr, notifier }: FixtureDeps): void {
  // ------------------------------------------------------------ SEP-2322 (MRTR) scenarios
  mrtr.registerTool(
    server,
    'test_input_required_result_elicitation',
    { description: 'MRTR: one form elicitation (user_name)' },
    (_args, _ctx, need) => {
      const answer = need.elicit('user_name', NAME_FORM, PRESUPPLIED);
      if (answer === undefined) return need.ask();
      if (answer.action !== 'accept') return need.fail(`Elicitation ${answer.action}ed: no name given.`);
      return text(`Hello, ${answer.content.name}!`);
    },
  );

  mrtr.registerTool(
    server,
    'test_input_required_result_sampling',
    { description: 'MRTR: one sampling request (capital_question)' },
    (_args, _ctx, need) => {
      const result = need.sample(
        'capital_question',
        {
          messages: [{ role: 'user', content: { type: 'text', text: 'What is the capital of France?' } }],
          maxTokens: 100,
        },
        PRESUPPLIED,
      );
      if (result === undefined) return need.ask();
      return text(`The model answered: ${samplingText(result)}`);
    },
  );

  mrtr.registerTool(
    server,
    'test_input_required_result_list_roots',
    { description: 'MRTR: one roots/list request (client_roots)' },
    (_args, _ctx, need) => {
      const roots = need.roots('client_roots', PRESUPPLIED);
      if (roots === undefined) return need.ask();
      return text(`The client shares ${roots.length} root(s): ${roots.map((r) => r.uri).join(', ') || '(none)'}`);
    },
  );

  mrtr.registerTool(
    server,
    'test_input_required_result_request_state',
    { description: 'MRTR: elicitation plus a sealed requestState (confirm)' },
    (_args, _ctx, need) => {
      const answer = need.elicit(
        'confirm',
        {
          message: 'Please confirm',
          requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
        },
        PRESUPPLIED,
      );
      if (answer === undefined) return need.ask();
      if (answer.action !== 'accept') return need.fail(`Confirmation ${answer.action}ed.`);
      return text(`state-ok: the sealed request state verified (round ${need.round}), ok=${answer.content.ok}`);
    },
  );

  mrtr.registerTool(
    server,
    'test_input_required_result_multiple_inputs',
    { description: 'MRTR: elicitation, sampling and roots in one round' },
    (_args, _ctx, need) => {
      const name = need.elicit('user_name', NAME_FORM, PRESUPPLIED);
      const greeting = need.sample(
        'greeting',
        {
          messages: [{ role: 'user', content: { type: 'text', text: 'Generate a greeting' } }],
          maxTokens: 50,
        },
        PRESUPPLIED,
      );
      const roots = need.roots('client_roots', PRESUPPLIED);
      if (name === undefined || greeting === undefined || roots === undefined) return need.ask();
      const who = name.action === 'accept' ? name.content.name : '(no name)';
      return text(`${samplingText(greeting)} ${who}; roots: ${roots.map((r) => r.uri).join(', ') || '(none)'}`);
    },
  );

  mrtr.registerTool(
    server,
    'test_input_required_result_multi_round',
    { description: 'MRTR: two rounds of elicitation; round 1 answer travels in the sealed state' },
    (_args, _ctx, need) => {
      const step1 = need.elicit(
        'step1',
        {
          message: 'Step 1: What is your name?',
          requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
        },
        PRESUPPLIED,
      );
      if (step1 === undefined) return need.ask();
      if (step1.action !== 'accept') return need.fail(`Step 1 ${step1.action}ed.`);
      const step2 = need.elicit(
        'step2',
        {
          message: 'Step 2: What is your favorite color?',
          requestedSchema: { type: 'object', properties: { color: { type: 'string' } }, required: ['color'] },
        },
        PRESUPPLIED,
      );
      if (step2 === undefined) return need.ask();
      if (step2.action !== 'accept') return need.fail(`Step 2 ${step2.action}ed.`);
      return text(`${step1.content.name} likes ${step2.content.color} (completed in round ${need.round}).`);
    },
  );

  mrtr.registerTool(
    server,
    'test_input_required_result_tampered_state',
    { description: 'MRTR: integrity-protected requestState; a tampered one is rejected' },
    (_args, _ctx, need) => {
      const answer = need.elicit(
        'confirm',
        {
          message: 'Please confirm',
          requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
        },
        PRESUPPLIED,
      );
      if (answer === undefined) return need.ask();
      return text(`Confirmed (${answer.action}).`);
    },
  );

  mrtr.registerTool(
    server,
    'test_input_required_result_capabilities',
    { description: 'MRTR: asks only what the client declared (elicitation degrades away without the capability)' },
    (_args, _ctx, need) => {
      const name = need.elicit('user_name', NAME_FORM, PRESUPPLIED);
      const answer = need.sample(
        'capital_question',
        {
          messages: [{ role: 'user', content: { type: 'text', text: 'What is the capital of France?' } }],
          maxTokens: 100,
        },
        PRESUPPLIED,
      );
      const nameDone = name !== undefined || !need.can('elicitation.form');
      const sampleDone = answer !== undefined || !need.can('sampling');
      if (!nameDone || !sampleDone) return need.ask({ missingCapability: 'degrade' });
      const who = name?.action === 'accept' ? name.content.name : 'someone';
      return text(`${who} asked; the model said: ${answer === undefined ? '(no sampling)' : samplingText(answer)}`);
    },
  );

  mrtr.registerPrompt(
    server,
    'test_input_required_result_prompt',
    { description: 'MRTR on prompts/get (user_context)' },
    (_args, _ctx, need) => {
      const answer = need.elicit(
        'user_context',
        {
          message: 'What context should the prompt use?',
          requestedSchema: { type: 'object', properties: { context: { type: 'string' } }, required: ['context'] },
        },
        PRESUPPLIED,
      );
      if (answer === undefined) return need.ask();
      const context = answer.action === 'accept' ? answer.content.context : '(none given)';
      return { messages: [{ role: 'user', content: { type: 'text', text: `Use this context: ${context}` } }] };
    },
  );

  // ------------------------------------------------------------ server-stateless (SEP-2575) diagnostics
  mrtr.registerTool(
    server,
    'test_missing_capability',
    { description: 'Needs sampling; without the declared capability it answers -32021' },
    (_args, _ctx, need) => {
      const answer = need.sample(
        'probe',
        {
          messages: [{ role: 'user', content: { type: 'text', text: 'Say hello' } }],
          maxTokens: 20,
        },
        PRESUPPLIED,
      );
      if (answer === undefined) return need.ask({ missingCapability: 'fail' });
      return text(`Sampling answered: ${samplingText(answer)}`);
    },
  );

  mrtr.registerTool(
    server,
    'test_streaming_elicitation',
    { description: 'Reports progress, then asks for input with an input_required result (never a server→client request)' },
    async (_args, ctx, need) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      if (progressToken !== undefined) {
        await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress: 1, total: 2 } });
      }
      const answer = need.elicit('user_name', NAME_FORM, PRESUPPLIED);
      if (answer === undefined) return need.ask();
      return text(answer.action === 'accept' ? `Hello, ${answer.content.name}!` : `Elicitation ${answer.action}ed.`);
    },
  );

  mrtr.registerTool(
    server,
    'test_logging_tool',
    { description: 'Logs three messages (only delivered when the request sets a logLevel)' },
    async (_args, ctx) => {
      for (const step of ['started', 'processing', 'completed']) {
        await ctx.mcpReq.log('info', `Tool execution ${step}`);
        await sleep(20);
      }
      return text('Tool with logging executed successfully');
    },
  );

  mrtr.registerTool(
    server,
    'test_trigger_tool_change',
    { description: 'Publishes notifications/tools/list_changed to open subscriptions' },
    () => {
      notifier()?.toolsChanged();
      return text('tools/list_changed published');
    },
  );

  mrtr.registerTool(
    server,
    'test_trigger_prompt_change',
    { description: 'Publishes notifications/prompts/list_changed to open subscriptions' },
    () => {
      notifier()?.promptsChanged();
      return text('prompts/list_changed published');
    },
  );

  // ------------------------------------------------------------ tools-* scenarios
  mrtr.registerTool(server, 'test_simple_text', { description: 'Tests simple text content response' }, () =>
    text('This is a simple text response for testing.'),
  );
  mrtr.registerTool(server, 'test_image_content', { description: 'Tests image content response' }, () => ({
    content: [{ type: 'image', data: TEST_IMAGE_BASE64, mimeType: 'image/png' }],
  }));
  mrtr.registerTool(server, 'test_audio_content', { description: 'Tests audio content response' }, () => ({
    content: [{ type: 'audio', data: TEST_AUDIO_BASE64, mimeType: 'audio/wav' }],
  }));
  mrtr.registerTool(server, 'test_embedded_resource', { description: 'Tests embedded resource content response' }, () => ({
    content: [
      {
        type: 'resource',
        resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
      },
    ],
  }));
  mrtr.registerTool(
    server,
    'test_multiple_content_types',
    { description: 'Tests response with multiple content types (text, image, resource)' },
    () => ({
      content: [
        { type: 'text', text: 'Multiple content types test:' },
        { type: 'image', data: TEST_IMAGE_BASE64, mimeType: 'image/png' },
        {
          type: 'resource',
          resource: {
            uri: 'test://mixed-content-resource',
            mimeType: 'application/json',
            text: JSON.stringify({ test: 'data', value: 123 }),
          },
        },
      ],
    }),
  );
  mrtr.registerTool(server, 'test_error_handling', { description: 'Tests error response handling' }, () => {
    throw new Error('This tool intentionally returns an error for testing');
  });
  mrtr.registerTool(
    server,
    'test_tool_with_progress',
    { description: 'Tests tool that reports progress notifications', inputSchema: z.object({}) },
    async (_args, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (progressToken !== undefined) {
          await ctx.mcpReq.notify({
            method: 'notifications/progress',
            params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
          });
        }
        if (progress !== 100) await sleep(50);
      }
      return text(String(progressToken ?? 'no progress token'));
    },
  );

  // ------------------------------------------------------------ json-schema-2020-12 (SEP-1613/2106): raw schema kept as is
  mrtr.registerTool(
    server,
    'json_schema_2020_12_tool',
    {
      description: 'Tool with JSON Schema 2020-12 features',
      inputSchema: fromJsonSchema<Record<string, unknown>>({
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        type: 'object',
        $defs: {
          address: {
            $anchor: 'addressDef',
            type: 'object',
            properties: { street: { type: 'string' }, city: { type: 'string' } },
          },
        },
        properties: {
          name: { type: 'string' },
          address: { $ref: '#/$defs/address' },
          contactMethod: { type: 'string', enum: ['phone', 'email'] },
          phone: { type: 'string' },
          email: { type: 'string' },
        },
        allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
        if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
        // biome-ignore lint/suspicious/noThenProperty: the JSON Schema `if`/`then`/`else` keyword, not a thenable
        then: { required: ['phone'] },
        else: { required: ['email'] },
        additionalProperties: false,
      }),
    },
    (args) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`),
  );

  // ------------------------------------------------------------ http-custom-header-server-validation (SEP-2243)
  mrtr.registerTool(
    server,
    'test_custom_header',
    {
      description: 'A tool whose `region` argument is mirrored in the Mcp-Param-Region header',
      // `x-mcp-header` is an MCP extension keyword, unknown to the JSON Schema type.
      inputSchema: fromJsonSchema<{ region: string }>({
        type: 'object',
        properties: { region: { type: 'string', 'x-mcp-header': 'Region', description: 'Deployment region' } },
        required: ['region'],
      } as Parameters<typeof fromJsonSchema>[0]),
    },
    ({ region }) => text(`Region: ${region}`),
  );

  // ------------------------------------------------------------ tasks-* scenarios (io.modelcontextprotocol/tasks, SEP-2663)
  mrtr.registerTool(server, 'greet', { description: 'Sync-only: says hello', inputSchema: z.object({ name: z.string() }) }, ({ name }) =>
    text(`Hello, ${name}!`),
  );
  mrtr.registerTool(
    server,
    'slow_compute',
    {
      description: 'Task-supporting: sleeps `seconds` seconds, then answers (cancellable)',
      inputSchema: z.object({ seconds: z.number().min(0).max(600), label: z.string().optional() }),
      task: 'optional',
    },
    ({ seconds, label }, _ctx, need) =>
      need.task(async (task) => {
        if (seconds > 0) await taskSleep(seconds * 1000, task.signal);
        return text(`Computed ${label ?? 'result'} after ${seconds}s`);
      }),
  );
  mrtr.registerTool(
    server,
    'failing_job',
    { description: 'Task-required: a tool execution error after ~1s', task: 'required' },
    (_args, _ctx, need) =>
      need.task(async (task) => {
        await taskSleep(1000, task.signal);
        return { ...text('failing_job failed, as it always does'), isError: true };
      }),
  );
  mrtr.registerTool(
    server,
    'protocol_error_job',
    { description: 'Task-supporting: fails with a protocol-level error', task: 'optional' },
    (_args, _ctx, need) =>
      need.task(async () => {
        throw new ProtocolError(-32603, 'protocol_error_job: internal failure (on purpose)');
      }),
  );
  mrtr.registerTool(
    server,
    'confirm_delete',
    {
      description: 'Task-supporting: asks for confirmation during the task',
      inputSchema: z.object({ filename: z.string() }),
      task: 'optional',
      taskInput: ['elicitation.form'],
    },
    ({ filename }, _ctx, need) =>
      need.task(async (task) => {
        const answer = await task.elicit('confirm', {
          message: `Delete ${filename}?`,
          requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
        });
        if (answer.action !== 'accept' || !answer.content.confirm) return text(`Kept ${filename}`);
        return text(`Deleted ${filename}`);
      }),
  );
  const NAME_AND_CONFIRM = { type: 'object', properties: { name: { type: 'string' }, confirm: { type: 'boolean' } } } as const;
  mrtr.registerTool(
    server,
    'multi_input',
    { description: 'Task-supporting: two questions at once during the task', task: 'optional', taskInput: ['elicitation.form'] },
    (_args, _ctx, need) =>
      need.task(async (task) => {
        const [first, second] = await Promise.all([
          task.elicit('first', { message: 'First input?', requestedSchema: NAME_AND_CONFIRM }),
          task.elicit('second', { message: 'Second input?', requestedSchema: NAME_AND_CONFIRM }),
        ]);
        const show = (a: typeof first) => (a.action === 'accept' ? (a.content.name ?? 'accepted') : a.action);
        return text(`Inputs: ${show(first)}, ${show(second)}`);
      }),
  );
  mrtr.registerTool(
    server,
    'test_tool_with_task',
    { description: 'MRTR then task: asks user_name in a protected round, then becomes a task', task: 'required' },
    (_args, _ctx, need) => {
      const answer = need.elicit('user_name', NAME_FORM);
      if (answer === undefined) return need.ask();
      if (answer.action !== 'accept') return need.fail(`Elicitation ${answer.action}ed: no name given.`);
      const name = answer.content.name;
      return need.task(async () => text(`Task finished for ${name}`));
    },
  );

  // ------------------------------------------------------------ resources-* scenarios
  mrtr.registerResource(
    server,
    'static-text',
    'test://static-text',
    { title: 'Static Text Resource', description: 'A static text resource for testing', mimeType: 'text/plain' },
    () => ({
      contents: [{ uri: 'test://static-text', mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
    }),
  );
  mrtr.registerResource(
    server,
    'static-binary',
    'test://static-binary',
    { title: 'Static Binary Resource', description: 'A static binary resource (image) for testing', mimeType: 'image/png' },
    () => ({ contents: [{ uri: 'test://static-binary', mimeType: 'image/png', blob: TEST_IMAGE_BASE64 }] }),
  );
  mrtr.registerResource(
    server,
    'template',
    new ResourceTemplate('test://template/{id}/data', { list: undefined }),
    { title: 'Resource Template', description: 'A resource template with parameter substitution', mimeType: 'application/json' },
    (uri, _ctx, _need, variables) => {
      const id = variables?.id;
      return {
        contents: [
          { uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) },
        ],
      };
    },
  );

  // ------------------------------------------------------------ prompts-* scenarios
  mrtr.registerPrompt(
    server,
    'test_simple_prompt',
    { title: 'Simple Test Prompt', description: 'A simple prompt without arguments' },
    () => ({
      messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }],
    }),
  );
  mrtr.registerPrompt(
    server,
    'test_prompt_with_arguments',
    {
      title: 'Prompt With Arguments',
      description: 'A prompt with required arguments',
      argsSchema: z.object({ arg1: z.string().describe('First test argument'), arg2: z.string().describe('Second test argument') }),
    },
    (args) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` } }],
    }),
  );
  mrtr.registerPrompt(
    server,
    'test_prompt_with_embedded_resource',
    {
      title: 'Prompt With Embedded Resource',
      description: 'A prompt that includes an embedded resource',
      argsSchema: z.object({ resourceUri: z.string().describe('URI of the resource to embed') }),
    },
    (args) => ({
      messages: [
        {
          role: 'user',
          content: {
            type: 'resource',
            resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
          },
        },
        { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
      ],
    }),
  );
  mrtr.registerPrompt(
    server,
    'test_prompt_with_image',
    { title: 'Prompt With Image', description: 'A prompt that includes image content' },
    () => ({
      messages: [
        { role: 'user', content: { type: 'image', data: TEST_IMAGE_BASE64, mimeType: 'image/png' } },
        { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
      ],
    }),
  );

  // ------------------------------------------------------------ completion-complete
  server.server.setRequestHandler('completion/complete', async () => ({ completion: { values: [], total: 0, hasMore: false } }));
}
