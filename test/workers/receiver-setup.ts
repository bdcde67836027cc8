// Global setup (Node) for the webhook tests: a loopback receiver the service delivers to from workerd.
import type { TestProject } from 'vitest/node';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const receiver = await startWebhookReceiver();
  project.provide('webhookReceiver', receiver.url);
  return () => receiver.close();
}
