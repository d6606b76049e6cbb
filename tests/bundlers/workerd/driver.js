// Delivers a Queues batch to the Worker under test through workerd's own queue event
// (`Fetcher.queue`, as miniflare does), and answers what the consumer acked / retried.
export default {
  async fetch(request, env) {
    const { messages } = await request.json();
    const r = await env.TARGET.queue(
      "embed-jobs",
      messages.map((m) => ({ id: m.id, timestamp: new Date(), body: m.body, attempts: m.attempts })),
    );
    return Response.json(r);
  },
};
