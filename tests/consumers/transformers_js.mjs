// Run an export with transformers.js in Node, as its users do: the repo id alone, from the hub at HOST
// (run by tests/test_consumers.py; prints one JSON object).
//
//   node transformers_js.mjs HOST REPO text-generation|feature-extraction|text-classification PROMPT [DTYPE [SUBFOLDER]]
import { AutoModel, AutoModelForSequenceClassification, AutoTokenizer, env, pipeline } from '@huggingface/transformers';

const [host, repo, task, prompt, dtype, subfolder] = process.argv.slice(2);
env.remoteHost = host;
env.allowLocalModels = false;
env.cacheDir = process.env.TRANSFORMERS_JS_CACHE;
const options = { ...(dtype ? { dtype } : {}), ...(subfolder ? { subfolder } : {}) };

if (task === 'text-generation') {
    const generator = await pipeline('text-generation', repo, options);
    const inputs = generator.tokenizer(prompt);
    const ids = await generator.model.generate({ ...inputs, max_new_tokens: 20, do_sample: false });
    const [text] = await generator(prompt, { max_new_tokens: 20, do_sample: false, return_full_text: false });
    console.log(JSON.stringify({ ids: ids.tolist().map((row) => row.map(Number)), text: text.generated_text }));
} else {
    const tokenizer = await AutoTokenizer.from_pretrained(repo);
    const cls = task === 'text-classification' ? AutoModelForSequenceClassification : AutoModel;
    const model = await cls.from_pretrained(repo, options);
    const inputs = tokenizer(prompt);
    const output = await model(inputs);
    const value = task === 'text-classification' ? output.logits : output.last_hidden_state;
    console.log(JSON.stringify({ output: value.tolist(), input_ids: inputs.input_ids.tolist().map((r) => r.map(Number)) }));
}
