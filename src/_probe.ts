/// <reference types="@cloudflare/workers-types" />
import { DurableObject } from 'cloudflare:workers';
export class X extends DurableObject {}
