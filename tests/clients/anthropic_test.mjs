// anthropic_test.mjs: the official Anthropic TypeScript SDK (@anthropic-ai/sdk, the version
// pinned in package.json) against two running `graft serve` on 127.0.0.1 (started by run.sh):
// `node anthropic_test.mjs PLAIN_PORT THINKING_PORT`, the second serving QwQ's thinking template.
//
// The Messages API, POST /v1/messages, with graft's own OpenAI endpoints as its oracles (the
// model is a toy whose words mean nothing, so the checks are on shapes, equivalences and
// greedy determinism): a Message's shape and usage, the prefix cache's reused prompt tokens as
// cache_read_input_tokens; the equivalent chat completion's text, token counts and finish
// reason (mapped to stop_reason); system and content as strings or text blocks alike;
// top_k 1 and a tiny top_p as greedy; the streamed events in their order, assembled by hand
// and by the SDK's messages.stream into the whole Message; stop_sequences cut where the
// greedy answer has them; an assistant prefill continued as /v1/completions continues the
// rendered prompt (/apply-template); tools (forced by name and by `any`, the input valid
// against input_schema and equal to the chat completion's arguments, streamed as
// input_json_delta; `auto` and `none`; tool results sent back); a thinking template's
// thought as a thinking block against reasoning_content, streamed as thinking_delta;
// count_tokens; refused requests as Anthropic's errors (400 invalid_request_error, the SDK's
// BadRequestError); models.list and models.retrieve. Every check runs; a failed one prints
// `not ok N` and the exit status is 1.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const [plainPort, thinkingPort] = process.argv.slice(2);
const base = (port) => `http://127.0.0.1:${port}`;
const client = new Anthropic({ baseURL: base(plainPort), apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const thinker = new Anthropic({ baseURL: base(thinkingPort), apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const model = 'stories260K';

let count = 0, passed = 0;
async function check(name, fn) {
    count++;
    try {
        await fn();
        passed++;
        console.log(`ok ${count} - ${name}`);
    } catch (e) {
        console.log(`not ok ${count} - ${name}`);
        console.log(`# ${String(e?.stack ?? e).split('\n').slice(0, 8).join('\n# ')}`);
    }
}

// POST a JSON body (or a raw string) to one of graft's endpoints: {status, json, text}.
async function post(port, path, body) {
    const response = await fetch(`${base(port)}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await response.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON: left null */ }
    return { status: response.status, headers: response.headers, json, text };
}
async function ok200(port, path, body) {
    const reply = await post(port, path, body);
    assert.equal(reply.status, 200, `${path}: ${reply.text}`);
    return reply.json;
}
const chat = (port, body) => ok200(port, '/v1/chat/completions', body);

// A request's messages as the OpenAI chat API has them (string contents only).
function chatMessages(system, messages) {
    return [...(system === undefined ? [] : [{ role: 'system', content: system }]), ...messages];
}
// An Anthropic tool as an OpenAI function tool.
const functionTool = (tool) => ({
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.input_schema },
});

const STOP_REASON = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use' };
const textOf = (message) => message.content.filter((b) => b.type === 'text')
    .map((b) => b.text).join('');
const thoughtOf = (message) => message.content.filter((b) => b.type === 'thinking')
    .map((b) => b.thinking).join('');
const promptTokens = (usage) => usage.input_tokens + (usage.cache_read_input_tokens ?? 0);
// a block's meaning, without what differs from one request to the next (ids, signatures)
function normalized(content) {
    return content.map((b) => {
        switch (b.type) {
        case 'text': return { type: b.type, text: b.text };
        case 'thinking': return { type: b.type, thinking: b.thinking };
        case 'tool_use': return { type: b.type, name: b.name, input: b.input };
        default: return b;
        }
    });
}

// The Message is the chat completion's answer: thought, text, tool calls, stop reason, usage.
function assertSameAsChat(message, completion) {
    const choice = completion.choices[0];
    assert.equal(thoughtOf(message), choice.message.reasoning_content ?? '');
    assert.equal(textOf(message), choice.message.content ?? '');
    assert.deepEqual(
        message.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]),
        (choice.message.tool_calls ?? []).map((c) => [c.function.name,
                                                     JSON.parse(c.function.arguments)]));
    assert.equal(message.stop_reason, STOP_REASON[choice.finish_reason]);
    assert.equal(message.usage.output_tokens, completion.usage.completion_tokens);
    assert.equal(promptTokens(message.usage), completion.usage.prompt_tokens);
    assert.ok(message.content.length > 0, 'the content is never empty');
}

// A Message's shape, as Anthropic's API gives it.
function assertMessage(message) {
    assert.match(message.id, /^msg_/);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(typeof message.model, 'string');
    assert.ok(message.model.length > 0);
    assert.ok(Array.isArray(message.content));
    assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(message.stop_reason),
              `stop_reason ${message.stop_reason}`);
    if (message.stop_reason === 'stop_sequence')
        assert.equal(typeof message.stop_sequence, 'string');
    else
        assert.equal(message.stop_sequence, null);
    const usage = message.usage;
    assert.ok(Number.isInteger(usage.input_tokens) && usage.input_tokens >= 0);
    assert.ok(Number.isInteger(usage.output_tokens) && usage.output_tokens >= 0);
    assert.equal(usage.cache_creation_input_tokens, 0);
    assert.ok(Number.isInteger(usage.cache_read_input_tokens)
              && usage.cache_read_input_tokens >= 0);
    for (const block of message.content) {
        if (block.type === 'text')
            assert.equal(typeof block.text, 'string');
        else if (block.type === 'thinking')
            assert.ok(typeof block.thinking === 'string' && typeof block.signature === 'string');
        else if (block.type === 'tool_use') {
            assert.match(block.id, /^[A-Za-z0-9_-]+$/); // what a tool_result's tool_use_id takes
            assert.equal(typeof block.name, 'string');
            assert.ok(block.input !== null && typeof block.input === 'object'
                      && !Array.isArray(block.input));
        } else
            assert.fail(`a block of type ${block.type}`);
    }
}

// A streamed request's server-sent events, read raw: each `event:` names its data's type.
async function events(port, body) {
    const response = await fetch(`${base(port)}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({ ...body, stream: true }),
    });
    const raw = await response.text();
    assert.equal(response.status, 200, raw);
    assert.match(response.headers.get('content-type'), /^text\/event-stream/);
    const list = [];
    for (const chunk of raw.split(/\r?\n\r?\n/)) {
        let name = null;
        const data = [];
        for (const line of chunk.split(/\r?\n/)) {
            if (line.startsWith('event:'))
                name = line.slice(6).trim();
            else if (line.startsWith('data:'))
                data.push(line.slice(5).replace(/^ /, ''));
        }
        if (data.length === 0)
            continue; // a comment or the end
        const event = JSON.parse(data.join('\n'));
        assert.equal(name, event.type, `event: ${name} carries ${event.type}`);
        list.push(event);
    }
    return list;
}

// The events in Anthropic's order, assembled into a Message; also each tool_use block's
// partial_json pieces and each thinking block's thinking_delta pieces, by block index.
function assemble(list) {
    const seq = list.filter((e) => e.type !== 'ping');
    assert.equal(seq[0]?.type, 'message_start');
    assert.equal(seq.at(-1)?.type, 'message_stop');
    assert.equal(seq.at(-2)?.type, 'message_delta');
    assert.equal(seq.filter((e) => e.type === 'message_delta').length, 1);
    const message = structuredClone(seq[0].message);
    assert.deepEqual(message.content, []);
    assert.equal(message.stop_reason, null);
    const json = {}, thoughts = {};
    let open = -1;
    for (const event of seq.slice(1, -2)) {
        if (event.type === 'content_block_start') {
            assert.equal(open, -1, 'a block starts while another is open');
            assert.equal(event.index, message.content.length, 'block indexes count up from 0');
            open = event.index;
            const block = structuredClone(event.content_block);
            if (block.type === 'tool_use') {
                assert.deepEqual(block.input, {});
                json[open] = '';
            } else if (block.type === 'thinking')
                thoughts[open] = [];
            message.content.push(block);
        } else if (event.type === 'content_block_delta') {
            assert.equal(event.index, open, 'a delta for the open block');
            const block = message.content[open], delta = event.delta;
            if (delta.type === 'text_delta') {
                assert.equal(block.type, 'text');
                block.text += delta.text;
            } else if (delta.type === 'thinking_delta') {
                assert.equal(block.type, 'thinking');
                block.thinking += delta.thinking;
                thoughts[open].push(delta.thinking);
            } else if (delta.type === 'signature_delta') {
                assert.equal(block.type, 'thinking');
                block.signature = delta.signature;
            } else if (delta.type === 'input_json_delta') {
                assert.equal(block.type, 'tool_use');
                json[open] += delta.partial_json;
            } else
                assert.fail(`a delta of type ${delta.type}`);
        } else if (event.type === 'content_block_stop') {
            assert.equal(event.index, open, 'the open block stops');
            if (message.content[open].type === 'tool_use')
                message.content[open].input = JSON.parse(json[open]);
            open = -1;
        } else
            assert.fail(`an event ${event.type} between message_start and message_delta`);
    }
    assert.equal(open, -1, 'every block stopped');
    const delta = seq.at(-2);
    message.stop_reason = delta.delta.stop_reason;
    message.stop_sequence = delta.delta.stop_sequence;
    assert.ok(Number.isInteger(delta.usage.output_tokens));
    for (const [key, value] of Object.entries(delta.usage))
        if (value !== null && value !== undefined)
            message.usage[key] = value; // the SDK's rule: message_delta's counts win
    return { message, json, thoughts };
}

// A streamed Message equals the whole one.
function assertSameMessage(streamed, whole) {
    assertMessage(streamed);
    assert.deepEqual(normalized(streamed.content), normalized(whole.content));
    assert.equal(streamed.stop_reason, whole.stop_reason);
    assert.equal(streamed.stop_sequence, whole.stop_sequence);
    assert.equal(streamed.usage.output_tokens, whole.usage.output_tokens);
}

const system = 'You tell short stories.';
const ask = { role: 'user', content: 'A story about a dog, please.' };
const story = { model, max_tokens: 24, temperature: 0, system, messages: [ask] };

let first;
await check('messages.create: a Message in Anthropic\'s shape, cut by max_tokens', async () => {
    first = await client.messages.create(story);
    assertMessage(first);
    assert.deepEqual(first.content.map((b) => b.type), ['text']);
    assert.ok(first.content[0].text.length > 10);
    assert.equal(first.stop_reason, 'max_tokens');
    assert.equal(first.usage.output_tokens, 24);
    assert.ok(promptTokens(first.usage) > 0);
});

await check('the equivalent chat completion\'s text, tokens and finish reason', async () => {
    const completion = await chat(plainPort, {
        model, messages: chatMessages(system, [ask]), max_tokens: 24, temperature: 0,
    });
    assertSameAsChat(first, completion);
    // several turns, the assistant's earlier answer among them, and no system prompt
    const turns = [ask, { role: 'assistant', content: first.content[0].text },
                   { role: 'user', content: 'What happened next?' }];
    const next = await client.messages.create({
        model, max_tokens: 16, temperature: 0, messages: turns,
    });
    assertMessage(next);
    assertSameAsChat(next, await chat(plainPort, {
        model, messages: turns, max_tokens: 16, temperature: 0,
    }));
});

await check('system and content as text blocks, metadata, any model: the same answer', async () => {
    const blocks = await client.messages.create({
        model: 'any-model-name', max_tokens: 24, temperature: 0,
        metadata: { user_id: 'reader-42' },
        system: [{ type: 'text', text: system }],
        messages: [{ role: 'user', content: [{ type: 'text', text: ask.content }] }],
    });
    assertMessage(blocks);
    assert.deepEqual(normalized(blocks.content), normalized(first.content));
    assert.equal(blocks.stop_reason, first.stop_reason);
    assert.equal(blocks.usage.output_tokens, first.usage.output_tokens);
    assert.equal(promptTokens(blocks.usage), promptTokens(first.usage));
});

await check('the same request again: cache_read_input_tokens > 0, the same answer', async () => {
    const params = { ...story, messages: [{ role: 'user', content: 'A song about a frog.' }] };
    const a = await client.messages.create(params);
    const b = await client.messages.create(params);
    assertMessage(a);
    assertMessage(b);
    assert.ok(b.usage.cache_read_input_tokens > 0, JSON.stringify(b.usage));
    assert.equal(promptTokens(b.usage), promptTokens(a.usage));
    assert.deepEqual(normalized(b.content), normalized(a.content));
    assert.equal(b.usage.output_tokens, a.usage.output_tokens);
});

await check('top_k 1, or a tiny top_p, at temperature 1: the greedy answer', async () => {
    for (const sampling of [{ top_k: 1 }, { top_p: 1e-6 }]) {
        const message = await client.messages.create({ ...story, temperature: 1, ...sampling });
        assertMessage(message);
        assert.equal(textOf(message), textOf(first), JSON.stringify(sampling));
    }
});

await check('streamed: Anthropic\'s events in order, adding up to the whole Message', async () => {
    const list = await events(plainPort, story);
    const { message } = assemble(list);
    assertSameMessage(message, first);
    assert.equal(promptTokens(message.usage), promptTokens(first.usage));
});

await check('messages.stream: text events and finalMessage give the whole Message', async () => {
    const stream = client.messages.stream(story);
    let text = '';
    stream.on('text', (delta) => { text += delta; });
    const final = await stream.finalMessage();
    assertSameMessage(final, first);
    assert.equal(text, textOf(first));
    // and create with stream: true, iterated
    let deltas = '', stop = null;
    for await (const event of await client.messages.create({ ...story, stream: true })) {
        if (event.type === 'content_block_delta' && event.delta.type === 'text_delta')
            deltas += event.delta.text;
        if (event.type === 'message_delta')
            stop = event.delta.stop_reason;
    }
    assert.equal(deltas, textOf(first));
    assert.equal(stop, first.stop_reason);
});

await check('stop_sequences: the text ends before the string, stop_reason set', async () => {
    const long = { ...story, max_tokens: 40 };
    const unstopped = await client.messages.create(long);
    assert.equal(unstopped.stop_reason, 'max_tokens');
    const full = textOf(unstopped);
    // a word from the middle of the greedy answer; the answer is cut at its first occurrence
    const words = full.match(/[A-Za-z]{3,}/g);
    assert.ok(words && words.length >= 3, full);
    const word = words[Math.floor(words.length / 2)];
    const cut = full.indexOf(word);
    assert.ok(cut > 0, `${word} in ${full}`);
    const params = { ...long, stop_sequences: ['zqxj', word] };
    const stopped = await client.messages.create(params);
    assertMessage(stopped);
    assert.equal(textOf(stopped), full.slice(0, cut));
    assert.equal(stopped.stop_reason, 'stop_sequence');
    assert.equal(stopped.stop_sequence, word);
    assert.ok(stopped.usage.output_tokens < 40);
    assertSameMessage(await client.messages.stream(params).finalMessage(), stopped);
    assertSameMessage(assemble(await events(plainPort, params)).message, stopped);
    const completion = await chat(plainPort, {
        model, messages: chatMessages(system, [ask]), max_tokens: 40, temperature: 0,
        stop: ['zqxj', word],
    });
    assert.equal(completion.choices[0].message.content, textOf(stopped));
    assert.equal(completion.choices[0].finish_reason, 'stop');
    // a string the answer never has changes nothing
    const never = await client.messages.create({ ...long, stop_sequences: ['zqxj'] });
    assert.equal(textOf(never), full);
    assert.equal(never.stop_reason, 'max_tokens');
    assert.equal(never.stop_sequence, null);
});

await check('a stop sequence at the very start: the content is one empty text block', async () => {
    const full = textOf(first);
    const head = full.slice(0, 3);
    assert.ok(head.trim().length > 0, JSON.stringify(full));
    const params = { ...story, stop_sequences: [head] };
    const stopped = await client.messages.create(params);
    assertMessage(stopped);
    assert.deepEqual(normalized(stopped.content), [{ type: 'text', text: '' }]);
    assert.equal(stopped.stop_reason, 'stop_sequence');
    assert.equal(stopped.stop_sequence, head);
    assertSameMessage(await client.messages.stream(params).finalMessage(), stopped);
});

await check('a prefill continued, as /v1/completions continues the rendered prompt', async () => {
    const prefill = 'Once upon a time, there was a big dog named';
    const params = {
        ...story, messages: [ask, { role: 'assistant', content: prefill }],
    };
    const message = await client.messages.create(params);
    assertMessage(message);
    assert.deepEqual(message.content.map((b) => b.type), ['text']);
    const { prompt } = await ok200(plainPort, '/apply-template', {
        messages: chatMessages(system, [ask]),
    });
    assert.equal(typeof prompt, 'string');
    const completion = await ok200(plainPort, '/v1/completions', {
        model, prompt: prompt + prefill, max_tokens: 24, temperature: 0,
    });
    assert.ok(textOf(message).length > 0);
    assert.equal(textOf(message), completion.choices[0].text);
    assert.equal(message.stop_reason, STOP_REASON[completion.choices[0].finish_reason]);
    assert.equal(message.usage.output_tokens, completion.usage.completion_tokens);
    // the prefill as a text block, and streamed: the same continuation
    const blocks = await client.messages.create({
        ...story,
        messages: [ask, { role: 'assistant', content: [{ type: 'text', text: prefill }] }],
    });
    assert.equal(textOf(blocks), textOf(message));
    assertSameMessage(await client.messages.stream(params).finalMessage(), message);
});

const weather = {
    name: 'get_weather',
    description: 'The weather in a city over the next days',
    input_schema: {
        type: 'object',
        properties: {
            city: { type: 'string', maxLength: 12 },
            days: { type: 'integer', minimum: 1, maximum: 7 },
        },
        required: ['city', 'days'],
    },
};
const clock = {
    name: 'get_time',
    description: 'The time in a time zone',
    input_schema: {
        type: 'object',
        properties: { zone: { type: 'string', maxLength: 8 }, seconds: { type: 'boolean' } },
        required: ['zone', 'seconds'],
    },
};
// the input is an instance of the tool's input_schema (the two above)
function assertValidInput(tool, input) {
    assert.deepEqual(Object.keys(input).sort(), Object.keys(tool.input_schema.properties).sort());
    if (tool === weather) {
        assert.equal(typeof input.city, 'string');
        assert.ok([...input.city].length <= 12);
        assert.ok(Number.isInteger(input.days) && input.days >= 1 && input.days <= 7);
    } else {
        assert.equal(typeof input.zone, 'string');
        assert.ok([...input.zone].length <= 8);
        assert.equal(typeof input.seconds, 'boolean');
    }
}
const where = { role: 'user', content: 'What is the weather in Paris?' };
const forcedParams = {
    model, max_tokens: 96, temperature: 0, messages: [where], tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather' },
};

let forced;
await check('tool_choice tool: one tool_use, its input valid, chat\'s arguments', async () => {
    forced = await client.messages.create(forcedParams);
    assertMessage(forced);
    assert.equal(forced.stop_reason, 'tool_use');
    const uses = forced.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.equal(uses[0].name, 'get_weather');
    assertValidInput(weather, uses[0].input);
    const completion = await chat(plainPort, {
        model, messages: [where], max_tokens: 96, temperature: 0, tools: [functionTool(weather)],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    assert.equal(completion.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(JSON.parse(completion.choices[0].message.tool_calls[0].function.arguments),
                     uses[0].input);
    assertSameAsChat(forced, completion);
});

await check('a forced tool_use streamed: input_json_delta pieces spell the input', async () => {
    const { message, json } = assemble(await events(plainPort, forcedParams));
    assertSameMessage(message, forced);
    const index = message.content.findIndex((b) => b.type === 'tool_use');
    assert.equal(typeof message.content[index].id, 'string');
    assert.equal(message.content[index].name, 'get_weather');
    assert.deepEqual(JSON.parse(json[index]), forced.content[index].input);
    const final = await client.messages.stream(forcedParams).finalMessage();
    assertSameMessage(final, forced);
});

await check('tool_choice any, no parallel calls: one valid call, as chat\'s required', async () => {
    const params = {
        model, max_tokens: 96, temperature: 0, messages: [where], tools: [clock, weather],
        tool_choice: { type: 'any', disable_parallel_tool_use: true },
    };
    const message = await client.messages.create(params);
    assertMessage(message);
    assert.equal(message.stop_reason, 'tool_use');
    const uses = message.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.ok(['get_time', 'get_weather'].includes(uses[0].name));
    assertValidInput(uses[0].name === 'get_time' ? clock : weather, uses[0].input);
    assertSameAsChat(message, await chat(plainPort, {
        model, messages: [where], max_tokens: 96, temperature: 0,
        tools: [functionTool(clock), functionTool(weather)], tool_choice: 'required',
        parallel_tool_calls: false,
    }));
    assertSameMessage(await client.messages.stream(params).finalMessage(), message);
});

let auto;
await check('tool_choice auto and none: chat\'s answers; none calls nothing', async () => {
    const params = { model, max_tokens: 24, temperature: 0, messages: [where], tools: [weather] };
    auto = await client.messages.create({ ...params, tool_choice: { type: 'auto' } });
    assertMessage(auto);
    assertSameAsChat(auto, await chat(plainPort, {
        model, messages: [where], max_tokens: 24, temperature: 0,
        tools: [functionTool(weather)], tool_choice: 'auto',
    }));
    const none = await client.messages.create({ ...params, tool_choice: { type: 'none' } });
    assertMessage(none);
    assert.equal(none.content.filter((b) => b.type === 'tool_use').length, 0);
    assert.notEqual(none.stop_reason, 'tool_use');
    assertSameAsChat(none, await chat(plainPort, {
        model, messages: [where], max_tokens: 24, temperature: 0,
        tools: [functionTool(weather)], tool_choice: 'none',
    }));
});

await check('a tool_result sent back (a string, text blocks): chat\'s answer', async () => {
    const use = forced.content.find((b) => b.type === 'tool_use');
    const history = [where, { role: 'assistant', content: [use] }];
    const result = '21 C and sunny';
    // the equivalent chat: the call as tool_calls, the result as a tool message
    const completion = await chat(plainPort, {
        model, max_tokens: 16, temperature: 0, tools: [functionTool(weather)],
        messages: [where,
                   { role: 'assistant', content: null, tool_calls: [{
                       id: use.id, type: 'function',
                       function: { name: use.name, arguments: JSON.stringify(use.input) } }] },
                   { role: 'tool', tool_call_id: use.id, content: result }],
    });
    // how two text blocks join is graft's choice: that one is only answered
    const twoBlocks = [{ type: 'text', text: '21 C' }, { type: 'text', text: 'sunny' }];
    for (const content of [result, [{ type: 'text', text: result }], twoBlocks]) {
        const reply = await client.messages.create({
            model, max_tokens: 16, temperature: 0, tools: [weather],
            messages: [...history,
                       { role: 'user',
                         content: [{ type: 'tool_result', tool_use_id: use.id, content }] }],
        });
        assertMessage(reply);
        assert.ok(reply.content.length > 0);
        if (content !== twoBlocks)
            assertSameAsChat(reply, completion);
    }
});

await check('count_tokens: the Message\'s input_tokens + cache_read_input_tokens', async () => {
    const counted = await client.messages.countTokens({ model, system, messages: [ask] });
    assert.ok(Number.isInteger(counted.input_tokens));
    assert.equal(counted.input_tokens, promptTokens(first.usage));
    const withTools = await client.messages.countTokens({
        model, messages: [where], tools: [weather], tool_choice: { type: 'auto' },
    });
    assert.equal(withTools.input_tokens, promptTokens(auto.usage));
    const blocks = await client.messages.countTokens({
        model, system: [{ type: 'text', text: system }],
        messages: [{ role: 'user', content: [{ type: 'text', text: ask.content }] }],
    });
    assert.equal(blocks.input_tokens, counted.input_tokens);
});

// QwQ's template opens a thought (<think>) when thinking is enabled; stories260K never closes
// it within max_tokens, so then the whole answer is one thinking block; either case is checked.
// budget_tokens beyond max_tokens: the thought is the model's own (test_server_messages.c
// checks a budget that closes it)
const thinkingParams = {
    model, max_tokens: 40, temperature: 0, system, messages: [ask],
    thinking: { type: 'enabled', budget_tokens: 1024 },
};
let thought;
await check('thinking: a thinking block (then text), chat\'s reasoning_content', async () => {
    thought = await thinker.messages.create(thinkingParams);
    assertMessage(thought);
    assert.equal(thought.content[0].type, 'thinking');
    assert.ok(thought.content[0].thinking.length > 0);
    assert.equal(typeof thought.content[0].signature, 'string');
    const completion = await chat(thinkingPort, {
        model, messages: chatMessages(system, [ask]), max_tokens: 40, temperature: 0,
        chat_template_kwargs: { enable_thinking: true },
    });
    const content = completion.choices[0].message.content ?? '';
    assert.deepEqual(thought.content.map((b) => b.type),
                     content === '' ? ['thinking'] : ['thinking', 'text']);
    assert.equal(thought.content[0].thinking, completion.choices[0].message.reasoning_content);
    assertSameAsChat(thought, completion);
});

await check('thinking streamed: thinking_delta pieces add up, finalMessage whole', async () => {
    const { message, thoughts } = assemble(await events(thinkingPort, thinkingParams));
    assertSameMessage(message, thought);
    assert.equal(thoughts[0].join(''), thought.content[0].thinking);
    assert.equal(typeof message.content[0].signature, 'string');
    const stream = thinker.messages.stream(thinkingParams);
    let pieces = '';
    stream.on('thinking', (delta) => { pieces += delta; });
    const final = await stream.finalMessage();
    assertSameMessage(final, thought);
    assert.equal(pieces, thought.content[0].thinking);
    assert.equal(typeof final.content[0].signature, 'string');
});

await check('thinking disabled, or not asked for: no thinking block, chat\'s answer', async () => {
    const { thinking, ...plain } = thinkingParams;
    for (const [params, kwargs] of [[{ ...plain, thinking: { type: 'disabled' } },
                                     { enable_thinking: false }],
                                    [plain, undefined]]) {
        const message = await thinker.messages.create(params);
        assertMessage(message);
        assert.equal(message.content.filter((b) => b.type === 'thinking').length, 0);
        assertSameAsChat(message, await chat(thinkingPort, {
            model, messages: chatMessages(system, [ask]), max_tokens: 40, temperature: 0,
            ...(kwargs ? { chat_template_kwargs: kwargs } : {}),
        }));
    }
});

await check('an assistant message with a thinking block before its text is accepted', async () => {
    const message = await thinker.messages.create({
        ...thinkingParams,
        messages: [ask,
                   { role: 'assistant', content: [
                       { type: 'thinking', thinking: 'A dog story.',
                         signature: thought.content[0].signature },
                       { type: 'text', text: 'A dog ran in the park.' }] },
                   { role: 'user', content: 'And then?' }],
    });
    assertMessage(message);
    assert.equal(message.content[0].type, 'thinking');
});

// a request graft refuses: the SDK's BadRequestError, Anthropic's error body, a message
// that names what is wrong
async function assertRefused(promise, pattern) {
    await assert.rejects(promise, (e) => {
        assert.ok(e instanceof Anthropic.BadRequestError, `${e?.constructor?.name}: ${e}`);
        assert.equal(e.status, 400);
        assert.equal(e.error?.type, 'error', JSON.stringify(e.error));
        assert.equal(e.error.error.type, 'invalid_request_error');
        assert.match(e.error.error.message, pattern);
        return true;
    });
}
const pixel = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9'
    + 'awAAAABJRU5ErkJggg==';
const image = {
    role: 'user',
    content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: pixel } },
              { type: 'text', text: 'What is this?' }],
};

await check('refused: no max_tokens, an image, an unknown role, a server tool (400s)', async () => {
    await assertRefused(client.messages.create({ model, messages: [ask] }), /max_tokens/);
    await assertRefused(client.messages.create({ model, max_tokens: 8, messages: [image] }),
                        /image/);
    await assertRefused(client.messages.create({
        model, max_tokens: 8, messages: [{ role: 'robot', content: 'Hello' }],
    }), /role|robot/);
    await assertRefused(client.messages.create({
        model, max_tokens: 8, messages: [ask],
        tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    }), /web_search/);
    // streamed, the refusal comes before any event
    await assertRefused(client.messages.stream({ model, max_tokens: 8, messages: [image] })
        .finalMessage(), /image/);
});

await check('max_tokens past the context: the Message ends at the context', async () => {
    const message = await client.messages.create({ model, max_tokens: 4000, temperature: 0,
                                                   messages: [ask] });
    assertMessage(message);
    const used = message.usage.input_tokens + message.usage.cache_read_input_tokens +
                 message.usage.output_tokens;
    assert.ok(used <= 256, `${used} tokens in a context of 256`);
    if (message.stop_reason === 'max_tokens')
        assert.equal(used, 256);
});

await check('refused: max_tokens 0, no messages, an unknown tool', async () => {
    await assertRefused(client.messages.create({ model, max_tokens: 0, messages: [ask] }),
                        /max_tokens/);
    await assertRefused(client.messages.create({ model, max_tokens: 8, messages: [] }),
                        /messages/);
    await assertRefused(client.messages.create({
        model, max_tokens: 8, messages: [ask], tools: [weather],
        tool_choice: { type: 'tool', name: 'get_nothing' },
    }), /get_nothing/);
    await assertRefused(client.messages.countTokens({ model }), /messages/);
});

await check('refused: a body that is not JSON, in Anthropic\'s error shape', async () => {
    const reply = await post(plainPort, '/v1/messages', '{"model": "x", "max_tokens": 8, ');
    assert.equal(reply.status, 400);
    assert.ok(reply.json, reply.text);
    assert.equal(reply.json.type, 'error');
    assert.equal(reply.json.error.type, 'invalid_request_error');
    assert.equal(typeof reply.json.error.message, 'string');
    assert.ok(reply.json.error.message.length > 0);
});

await check('models.list and models.retrieve: the served model in Anthropic\'s shape', async () => {
    const page = await client.models.list();
    assert.deepEqual(page.data.map((m) => m.id), [model]);
    const one = await client.models.retrieve(model);
    assert.equal(one.type, 'model');
    assert.equal(one.id, model);
    assert.equal(one.display_name, model);
    assert.ok(!Number.isNaN(Date.parse(one.created_at)), one.created_at);
});

console.log(`${passed} passed, ${count - passed} failed`);
process.exit(passed === count ? 0 : 1);
