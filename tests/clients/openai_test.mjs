// openai_test.mjs: the official openai npm client (the version pinned in package.json)
// against a running `graft serve` on 127.0.0.1:PORT (started by run.sh).
//
// Chat and text completions, whole and streamed: the streamed deltas add up to the whole answer,
// usage comes in the last chunk; n > 1 (each choice the answer of its seed alone) and best_of;
// log-probabilities as the SDK types them; the model list; JSON mode and structured outputs
// (response_format json_object and json_schema, strings held to a format, a pattern and lengths,
// numbers to bounds, a zod discriminated union through the SDK's zodResponseFormat and parse) and a
// forced tool call, also in the legacy functions form; a thinking model's thought as
// reasoning_content and as the Responses API's reasoning item (a second server, with QwQ's
// template); a request graft refuses surfaces as the SDK's BadRequestError with the status and the
// field graft names; fill in the middle with the completions API's suffix (a third server, a coder
// model); llama-server's GBNF grammar field, DRY and Mirostat, sent in the body; a base URL
// without /v1, as llama-server's paths allow.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { LengthFinishReasonError } from 'openai/error';
import { z } from 'zod';

const port = process.argv[2];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
let passed = 0;
async function check(name, fn) {
    await fn();
    passed++;
    console.log(`ok ${passed} - ${name}`);
}

const messages = [
    { role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: 'A story about a dog, please.' },
];

await check('models.list', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].id, 'stories260K');
});

let whole;
await check('chat completion, whole', async () => {
    whole = await client.chat.completions.create({ model: 'stories260K', messages, max_tokens: 24, temperature: 0 });
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.ok(whole.choices[0].message.content.length > 10);
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(whole.usage.completion_tokens, 24);
});

await check('a base URL without /v1 (llama-server\'s paths): the same answer', async () => {
    const bare = new OpenAI({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    const again = await bare.chat.completions.create({ model: 'stories260K', messages, max_tokens: 24, temperature: 0 });
    assert.equal(again.choices[0].message.content, whole.choices[0].message.content);
    assert.equal((await bare.models.list()).data[0].id, 'stories260K');
});

await check('DRY and Mirostat (llama-server\'s fields, sent in the body) change the text', async () => {
    const prompt = 'Lily had a red ball. Lily had a red ball. Lily had a red ball. Lily had a';
    const plain = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 16, temperature: 0 });
    const dry = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 16, temperature: 0, dry_multiplier: 0.8 });
    assert.notEqual(dry.choices[0].text, plain.choices[0].text);
    const params = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 24, temperature: 1.5, top_k: 0, top_p: 1, min_p: 0, seed: 3 };
    const sampled = await client.completions.create(params);
    const mirostat = await client.completions.create({ ...params, mirostat: 2, mirostat_tau: 3 });
    assert.notEqual(mirostat.choices[0].text, sampled.choices[0].text);
});

await check('chat completion, streamed, same text and usage', async () => {
    const stream = await client.chat.completions.create({
        model: 'stories260K', messages, max_tokens: 24, temperature: 0, stream: true,
        stream_options: { include_usage: true },
    });
    let text = '', usage = null, finish = null;
    for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
            text += c.delta.content ?? '';
            finish = c.finish_reason ?? finish;
        }
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, 24);
    assert.ok(usage.prompt_tokens_details.cached_tokens > 0); // the prompt came from the cache
});

await check('text completion, whole and streamed', async () => {
    const params = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 20, temperature: 0 };
    const done = await client.completions.create(params);
    assert.equal(done.object, 'text_completion');
    let text = '';
    for await (const chunk of await client.completions.create({ ...params, stream: true }))
        text += chunk.choices[0]?.text ?? '';
    assert.equal(text, done.choices[0].text);
});

await check('seeded sampling repeats', async () => {
    const params = { model: 'stories260K', prompt: 'The cat', max_tokens: 20, temperature: 1, seed: 5 };
    const a = await client.completions.create(params);
    const b = await client.completions.create(params);
    assert.equal(a.choices[0].text, b.choices[0].text);
});

await check('n choices: choice i is the answer of seed + i alone', async () => {
    const params = { model: 'stories260K', messages, max_tokens: 16, temperature: 1, seed: 21 };
    const many = await client.chat.completions.create({ ...params, n: 3 });
    assert.equal(many.choices.length, 3);
    for (let i = 0; i < 3; i++) {
        assert.equal(many.choices[i].index, i);
        const one = await client.chat.completions.create({ ...params, seed: 21 + i });
        assert.equal(many.choices[i].message.content, one.choices[0].message.content);
    }
    assert.equal(many.usage.completion_tokens, 3 * 16);
});

await check('best_of: the candidate of highest mean log-probability per token', async () => {
    const params = { model: 'stories260K', prompt: 'The dog', max_tokens: 10, temperature: 1, seed: 8 };
    const all = await client.completions.create({ ...params, n: 4, logprobs: 0 });
    const mean = (c) => c.logprobs.token_logprobs.reduce((a, b) => a + b, 0) / c.logprobs.token_logprobs.length;
    let best = all.choices[0];
    for (const c of all.choices) if (mean(c) > mean(best)) best = c;
    const answer = await client.completions.create({ ...params, best_of: 4 });
    assert.equal(answer.choices.length, 1);
    assert.equal(answer.choices[0].text, best.text);
    assert.equal(answer.usage.completion_tokens, all.usage.completion_tokens);
});

await check('several prompts: choice p is the answer of prompt p alone', async () => {
    const prompts = ['Once upon a time', 'The dog ran'];
    const params = { model: 'stories260K', max_tokens: 12, temperature: 0 };
    const batch = await client.completions.create({ ...params, prompt: prompts });
    assert.equal(batch.choices.length, 2);
    let promptTokens = 0;
    for (let p = 0; p < 2; p++) {
        assert.equal(batch.choices[p].index, p);
        const one = await client.completions.create({ ...params, prompt: prompts[p] });
        assert.equal(batch.choices[p].text, one.choices[0].text);
        promptTokens += one.usage.prompt_tokens;
    }
    assert.equal(batch.usage.prompt_tokens, promptTokens);
    const streamed = ['', ''];
    for await (const chunk of await client.completions.create({ ...params, prompt: prompts, stream: true }))
        for (const c of chunk.choices) streamed[c.index] += c.text;
    assert.deepEqual(streamed, batch.choices.map((c) => c.text));
});

await check('logprobs: one entry per token, spelling the text, streamed alike', async () => {
    const params = { model: 'stories260K', messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2 };
    const whole = await client.chat.completions.create(params);
    const entries = whole.choices[0].logprobs.content;
    assert.equal(entries.length, 10);
    assert.equal(entries.map((e) => e.token).join(''), whole.choices[0].message.content);
    for (const e of entries) {
        assert.ok(e.logprob <= 0);
        assert.equal(e.top_logprobs.length, 2);
        assert.equal(e.top_logprobs[0].logprob, e.logprob); // greedy took the likeliest
    }
    const streamed = [];
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true }))
        for (const c of chunk.choices) streamed.push(...(c.logprobs?.content ?? []));
    assert.deepEqual(streamed, entries);
    // "logprobs": true alone (no alternatives) gives each token the same log-probability
    const bare = await client.chat.completions.create({ ...params, top_logprobs: undefined });
    assert.deepEqual(bare.choices[0].logprobs.content.map((e) => [e.token, e.logprob]),
                     entries.map((e) => [e.token, e.logprob]));
});

await check('echo with logprobs scores a text: an answer fed back gets the logprobs it was sampled with', async () => {
    const prompt = 'Once upon a time';
    const answer = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 6, temperature: 0, logprobs: 1 });
    const text = prompt + answer.choices[0].text;
    const scored = await client.completions.create({ model: 'stories260K', prompt: text, max_tokens: 0, echo: true, logprobs: 1 });
    const lp = scored.choices[0].logprobs;
    assert.equal(scored.choices[0].text, text);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.tokens.join(''), text);
    // the answer's tokens are the scored text's last ones when its text tokenizes back to them
    const tail = lp.token_logprobs.slice(-6);
    assert.deepEqual(lp.tokens.slice(-6), answer.choices[0].logprobs.tokens);
    assert.deepEqual(tail, answer.choices[0].logprobs.token_logprobs);
    assert.equal(scored.usage.completion_tokens, 0);
});

await check('a refused request is the SDK\'s BadRequestError', async () => {
    await assert.rejects(
        client.chat.completions.create({ model: 'stories260K', messages, temperature: 7 }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
    );
    await assert.rejects(
        client.chat.completions.create({
            model: 'stories260K', messages,
            response_format: {
                type: 'json_schema',
                json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'array', uniqueItems: true } } } },
            },
        }),
        (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format.json_schema.schema'
            && e.message.includes('uniqueItems'),
    );
});

await check('response_format json_schema (structured outputs): the answer is an instance', async () => {
    const schema = {
        type: 'object',
        properties: {
            title: { type: 'string' },
            year: { type: 'integer' },
            genre: { enum: ['tale', 'fable'] },
            sequel: { anyOf: [{ type: 'string' }, { type: 'null' }] },
        },
        required: ['title', 'year', 'genre', 'sequel'],
        additionalProperties: false,
    };
    const answer = await client.chat.completions.create({
        model: 'stories260K', messages, max_tokens: 96, temperature: 0,
        response_format: { type: 'json_schema', json_schema: { name: 'story', strict: true, schema } },
        logit_bias: { 37: 6, 436: 6 },
    });
    assert.equal(answer.choices[0].finish_reason, 'stop');
    const story = JSON.parse(answer.choices[0].message.content);
    assert.deepEqual(Object.keys(story), ['title', 'year', 'genre', 'sequel']);
    assert.equal(typeof story.title, 'string');
    assert.ok(Number.isInteger(story.year));
    assert.ok(['tale', 'fable'].includes(story.genre));
    assert.ok(story.sequel === null || typeof story.sequel === 'string');
});

await check('structured outputs with a date, a pattern, lengths and bounds: the values are held to them', async () => {
    const schema = {
        type: 'object',
        properties: {
            day: { type: 'string', format: 'date' },
            code: { type: 'string', pattern: '^[A-Z]{3}-\\d{2}$' },
            who: { type: 'string', minLength: 1, maxLength: 4 },
            rating: { type: 'number', minimum: 1, maximum: 5 },
        },
        required: ['day', 'code', 'who', 'rating'],
        additionalProperties: false,
    };
    const answer = await client.chat.completions.create({
        model: 'stories260K', messages, max_tokens: 96, temperature: 0,
        response_format: { type: 'json_schema', json_schema: { name: 'entry', strict: true, schema } },
        logit_bias: { 37: 6, 436: 6, 128: 10 },
    });
    assert.equal(answer.choices[0].finish_reason, 'stop');
    const entry = JSON.parse(answer.choices[0].message.content);
    assert.match(entry.day, /^\d{4}-\d{2}-\d{2}$/);
    assert.equal(new Date(`${entry.day}T00:00:00Z`).toISOString().slice(0, 10), entry.day); // a real day
    assert.match(entry.code, /^[A-Z]{3}-\d{2}$/);
    assert.ok([...entry.who].length >= 1 && [...entry.who].length <= 4);
    assert.ok(entry.rating >= 1 && entry.rating <= 5);
});

await check('zod through the SDK: a discriminated union with bounds, parsed and checked by zod', async () => {
    const Shape = z.discriminatedUnion('kind', [
        z.object({ kind: z.literal('circle'), radius: z.number().int().min(1).max(9) }),
        z.object({ kind: z.literal('square'), side: z.number().int().min(1).max(9) }),
    ]);
    const Drawing = z.object({ title: z.string().min(1).max(12), shape: Shape });
    for (const seed of [1, 2, 3]) {
        const completion = await client.chat.completions.parse({
            model: 'stories260K', messages, max_tokens: 96, temperature: 1, seed,
            response_format: zodResponseFormat(Drawing, 'drawing'),
            logit_bias: { 37: 6, 436: 6, 128: 10 },
        });
        // parse() runs zod on the answer: it throws unless the answer is a Drawing
        const drawing = completion.choices[0].message.parsed;
        assert.ok(drawing.shape.kind === 'circle' || drawing.shape.kind === 'square');
    }
});

await check('zod through the SDK: unions without a tag, followed together, parsed by zod', async () => {
    // cats and dogs both begin with a name; an id is a small integer or a number from 100 to 200
    const Pet = z.union([
        z.object({ name: z.string().max(8), meow: z.boolean() }),
        z.object({ name: z.string().max(8), bark: z.number().int().min(1).max(5) }),
    ]);
    const Id = z.union([z.number().int().min(0).max(9), z.number().min(100).max(200)]);
    const Owner = z.object({ pets: z.array(Pet).min(1).max(2), id: Id });
    let parsed = 0;
    for (const seed of [1, 2, 3, 4]) {
        let completion;
        try {
            completion = await client.chat.completions.parse({
                model: 'stories260K', messages, max_tokens: 160, temperature: 1, seed,
                response_format: zodResponseFormat(Owner, 'owner'),
                logit_bias: { 37: 6, 436: 6, 128: 10 },
            });
        } catch (e) {
            if (e instanceof LengthFinishReasonError) // cut by max_tokens: nothing to parse
                continue;
            throw e;
        }
        // parse() runs zod on the answer: it throws unless the answer is an Owner
        const owner = completion.choices[0].message.parsed;
        for (const pet of owner.pets)
            assert.ok(typeof pet.meow === 'boolean' || Number.isInteger(pet.bark));
        assert.ok((Number.isInteger(owner.id) && owner.id <= 9) || owner.id >= 100);
        parsed++;
    }
    assert.ok(parsed >= 2, `${parsed} of 4 answers finished`);
});

await check('response_format json_object: JSON.parse takes the answer, whole and streamed', async () => {
    // stories260K rarely closes an object by itself: bias '"' (37, 436), ':' (61, 467), '}' (128)
    const params = {
        model: 'stories260K', messages, max_tokens: 96, temperature: 0,
        response_format: { type: 'json_object' },
        logit_bias: { 37: 6, 436: 6, 61: 6, 467: 6, 128: 15 },
    };
    const answer = await client.chat.completions.create(params);
    assert.equal(answer.choices[0].finish_reason, 'stop');
    const content = answer.choices[0].message.content;
    const parsed = JSON.parse(content);
    assert.equal(typeof parsed, 'object');
    assert.ok(parsed !== null && !Array.isArray(parsed));
    let streamed = '';
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true }))
        for (const c of chunk.choices) streamed += c.delta.content ?? '';
    assert.equal(streamed, content);
});

await check('grammar (llama-server\'s GBNF field, sent in the body): the answer is a match, whole and streamed', async () => {
    const grammar = 'root ::= [0-9]{3} "-" [0-9]{4}\n';
    const params = { model: 'stories260K', messages, max_tokens: 20, temperature: 1, seed: 7, grammar };
    const answer = await client.chat.completions.create(params);
    assert.match(answer.choices[0].message.content, /^[0-9]{3}-[0-9]{4}$/);
    assert.equal(answer.choices[0].finish_reason, 'stop');
    const stream = await client.chat.completions.create({ ...params, stream: true });
    let text = '';
    for await (const chunk of stream)
        for (const c of chunk.choices) text += c.delta.content ?? '';
    assert.equal(text, answer.choices[0].message.content);
    await assert.rejects(client.chat.completions.create({ ...params, grammar: 'root ::= digit\n' }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /line 1, column 10/.test(e.message));
});

await check('tool_choice naming a function: one call, its arguments held to the parameters', async () => {
    const tools = [{
        type: 'function',
        function: {
            name: 'get_weather',
            parameters: {
                type: 'object',
                properties: { city: { type: 'string' }, unit: { enum: ['C', 'F'] } },
                required: ['city', 'unit'],
            },
        },
    }];
    const answer = await client.chat.completions.create({
        model: 'stories260K', messages, max_tokens: 96, temperature: 0, tools,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        logit_bias: { 37: 6, 436: 6 },
    });
    const choice = answer.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    const args = JSON.parse(call.function.arguments);
    assert.deepEqual(Object.keys(args), ['city', 'unit']);
    assert.ok(['C', 'F'].includes(args.unit));
});

await check('legacy functions: function_call naming one gives the call tool_choice gives, as function_call', async () => {
    const parameters = {
        type: 'object',
        properties: { city: { type: 'string' }, unit: { enum: ['C', 'F'] } },
        required: ['city', 'unit'],
    };
    const common = { model: 'stories260K', messages, max_tokens: 96, temperature: 0, logit_bias: { 37: 6, 436: 6 } };
    const legacy = await client.chat.completions.create({
        ...common, functions: [{ name: 'get_weather', parameters }], function_call: { name: 'get_weather' },
    });
    const tools = await client.chat.completions.create({
        ...common, tools: [{ type: 'function', function: { name: 'get_weather', parameters } }],
        tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false,
    });
    const choice = legacy.choices[0];
    assert.equal(choice.finish_reason, 'function_call');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls, undefined);
    assert.equal(choice.message.function_call.name, 'get_weather');
    assert.equal(choice.message.function_call.arguments, tools.choices[0].message.tool_calls[0].function.arguments);
    const stream = await client.chat.completions.create({
        ...common, functions: [{ name: 'get_weather', parameters }], function_call: { name: 'get_weather' }, stream: true,
    });
    let name = '', args = '', finish = null;
    for await (const chunk of stream)
        for (const c of chunk.choices) {
            name += c.delta.function_call?.name ?? '';
            args += c.delta.function_call?.arguments ?? '';
            finish = c.finish_reason ?? finish;
        }
    assert.deepEqual([name, args, finish], ['get_weather', choice.message.function_call.arguments, 'function_call']);
});

await check('responses API: the same text as chat, streamed alike, continued with previous_response_id', async () => {
    const instructions = messages[0].content, input = messages[1].content;
    const chat = await client.chat.completions.create({
        model: 'stories260K', messages, max_tokens: 24, temperature: 0,
    });
    const first = await client.responses.create({
        model: 'stories260K', instructions, input, max_output_tokens: 24, temperature: 0,
    });
    assert.equal(first.object, 'response');
    assert.equal(first.output_text, chat.choices[0].message.content); // the SDK's joined text
    assert.equal(first.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(first.usage.output_tokens, chat.usage.completion_tokens);
    // streamed: the deltas spell the text, the last event carries the whole response
    const stream = await client.responses.create({
        model: 'stories260K', instructions, input, max_output_tokens: 24, temperature: 0,
        stream: true,
    });
    let deltas = '', last = null, sequence = 0;
    for await (const event of stream) {
        assert.equal(event.sequence_number, sequence++);
        if (event.type === 'response.output_text.delta')
            deltas += event.delta;
        last = event;
    }
    assert.equal(deltas, first.output_text);
    assert.ok(['response.completed', 'response.incomplete'].includes(last.type));
    assert.equal(last.response.output_text ?? last.response.output[0].content[0].text,
                 first.output_text);
    // a second turn: the stored conversation, then the new input, as chat would see it
    const next = 'What happened next?';
    const second = await client.responses.create({
        model: 'stories260K', previous_response_id: first.id, input: next,
        max_output_tokens: 16, temperature: 0,
    });
    const chat2 = await client.chat.completions.create({
        model: 'stories260K', max_tokens: 16, temperature: 0,
        messages: [messages[1], { role: 'assistant', content: first.output_text },
                   { role: 'user', content: next }],
    });
    assert.equal(second.output_text, chat2.choices[0].message.content);
    assert.equal(second.previous_response_id, first.id);
    const stored = await client.responses.retrieve(first.id);
    assert.equal(stored.output_text, first.output_text);
    await client.responses.delete(first.id);
    await assert.rejects(client.responses.retrieve(first.id), OpenAI.NotFoundError);
});

await check('responses API: include message.output_text.logprobs gives chat\'s log-probabilities, streamed alike', async () => {
    const params = {
        model: 'stories260K', input: messages[1].content, max_output_tokens: 8, temperature: 0,
        include: ['message.output_text.logprobs'], top_logprobs: 2,
    };
    const whole = await client.responses.create(params);
    const chat = await client.chat.completions.create({
        model: 'stories260K', messages: [messages[1]], max_tokens: 8, temperature: 0,
        logprobs: true, top_logprobs: 2,
    });
    const entries = whole.output[0].content[0].logprobs;
    assert.equal(entries.map((e) => e.token).join(''), whole.output_text);
    assert.deepEqual(entries, chat.choices[0].logprobs.content);
    const streamed = [];
    for await (const event of await client.responses.create({ ...params, stream: true }))
        if (event.type === 'response.output_text.delta')
            streamed.push(...event.logprobs);
    assert.deepEqual(streamed, entries);
});

await check('responses API: a forced function call, its output sent back', async () => {
    const tools = [{
        type: 'function', name: 'get_weather', description: 'The weather in a city',
        parameters: {
            type: 'object', additionalProperties: false, required: ['city', 'unit'],
            properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['C', 'F'] } },
        },
        strict: true,
    }];
    const response = await client.responses.create({
        model: 'stories260K', input: 'Weather in Paris?', tools, max_output_tokens: 96,
        temperature: 0, tool_choice: { type: 'function', name: 'get_weather' },
        logit_bias: { 37: 6, 436: 6 },
    });
    const calls = response.output.filter((item) => item.type === 'function_call');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    const args = JSON.parse(calls[0].arguments);
    assert.deepEqual(Object.keys(args), ['city', 'unit']);
    const answer = await client.responses.create({
        model: 'stories260K', previous_response_id: response.id, tools, max_output_tokens: 8,
        temperature: 0,
        input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: '21 C' }],
    });
    assert.ok(['completed', 'incomplete'].includes(answer.status));
});

// QwQ's template opens a thought when enable_thinking is true; stories260K never closes it.
const thinking = new OpenAI({ baseURL: `http://127.0.0.1:${process.argv[3]}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
const thinkingParams = {
    model: 'stories260K', max_tokens: 20, temperature: 0,
    chat_template_kwargs: { enable_thinking: true },
};

await check('a thinking template: reasoning_content apart from the content, streamed alike', async () => {
    const whole = await thinking.chat.completions.create({ ...thinkingParams, messages });
    const message = whole.choices[0].message;
    assert.ok(message.reasoning_content.length > 0);
    assert.equal(message.content, '');
    assert.equal(whole.usage.completion_tokens_details.reasoning_tokens, 20);
    let thought = '', content = '';
    const stream = await thinking.chat.completions.create({ ...thinkingParams, messages, stream: true });
    for await (const chunk of stream) {
        thought += chunk.choices[0]?.delta?.reasoning_content ?? '';
        content += chunk.choices[0]?.delta?.content ?? '';
    }
    assert.equal(thought, message.reasoning_content);
    assert.equal(content, '');
    const raw = await thinking.chat.completions.create({ ...thinkingParams, messages, reasoning_format: 'none' });
    assert.equal(raw.choices[0].message.content.trim(), message.reasoning_content);
});

await check('a thinking template, responses API: a reasoning item, which the SDK\'s stream helper assembles', async () => {
    const params = {
        model: 'stories260K', input: 'A story about a dog, please.', instructions: 'You tell short stories.',
        max_output_tokens: 20, temperature: 0, chat_template_kwargs: { enable_thinking: true },
    };
    const whole = await thinking.responses.create(params);
    assert.equal(whole.status, 'incomplete');
    assert.equal(whole.output[0].type, 'reasoning');
    assert.equal(whole.usage.output_tokens_details.reasoning_tokens, 20);
    const stream = thinking.responses.stream(params);
    let deltas = '';
    stream.on('response.reasoning_text.delta', (event) => { deltas += event.delta; });
    const assembled = await stream.finalResponse();
    assert.equal(assembled.output[0].content[0].text, whole.output[0].content[0].text);
    assert.equal(deltas, whole.output[0].content[0].text);
    const chat = await thinking.chat.completions.create({ ...thinkingParams, messages });
    assert.equal(whole.output[0].content[0].text, chat.choices[0].message.reasoning_content);
});

const coderUrl = `http://127.0.0.1:${process.argv[4]}`;
const coder = new OpenAI({ baseURL: `${coderUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
await check('suffix fills in the middle: the prompt is [BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>, streamed alike', async () => {
    const prefix = 'def area(w, h):\n    return ', suffix = '\n\nprint(area(3, 4))\n';
    const params = { model: 'coder', prompt: prefix, suffix, max_tokens: 8, temperature: 0 };
    const whole = await coder.completions.create(params);
    const count = async (content) => (await (await fetch(`${coderUrl}/tokenize`, {
        method: 'POST', body: JSON.stringify({ content }),
    })).json()).tokens.length;
    // BOS, the three FIM tokens, and the two texts' tokens
    assert.equal(whole.usage.prompt_tokens, 4 + await count(prefix) + await count(suffix));
    let text = '', finish = null;
    for await (const chunk of await coder.completions.create({ ...params, stream: true })) {
        text += chunk.choices[0]?.text ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, whole.choices[0].text);
    assert.equal(finish, whole.choices[0].finish_reason);
    await assert.rejects(client.completions.create({ ...params, model: 'stories260K' }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /fill-in-the-middle/.test(e.message));
});

console.log(`${passed} passed, 0 failed`);
