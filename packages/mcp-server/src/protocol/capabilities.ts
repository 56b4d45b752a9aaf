import type { ClientCapabilities, InputRequest } from '@mrtr/core/adapter';
import { isObject } from '@mrtr/core/options';

/** What an embedded request needs the client to have declared in this request's `_meta`. */
export type InputRequestKind = 'elicitation.form' | 'elicitation.url' | 'sampling' | 'sampling.tools' | 'roots';

/** The capability kind one embedded request needs. */
export function requiredKind(request: InputRequest): InputRequestKind {
  switch (request.method) {
    case 'elicitation/create':
      return request.params?.mode === 'url' ? 'elicitation.url' : 'elicitation.form';
    case 'sampling/createMessage':
      return request.params?.tools !== undefined || request.params?.toolChoice !== undefined ? 'sampling.tools' : 'sampling';
    case 'roots/list':
      return 'roots';
    default:
      throw new TypeError('requiredKind: not an input request');
  }
}

/**
 * The embedded request kinds this client declared. A bare `elicitation: {}` means form only.
 * Capabilities come from this request's `_meta` only: never from earlier requests.
 */
export function allowedKinds(capabilities: ClientCapabilities | undefined | null): Set<InputRequestKind> {
  const kinds = new Set<InputRequestKind>();
  if (!isObject(capabilities)) return kinds;
  const { elicitation, sampling, roots } = capabilities;
  if (isObject(elicitation)) {
    const hasForm = isObject(elicitation.form);
    const hasUrl = isObject(elicitation.url);
    if (hasForm || !hasUrl) kinds.add('elicitation.form');
    if (hasUrl) kinds.add('elicitation.url');
  }
  if (isObject(sampling)) {
    kinds.add('sampling');
    if (isObject(sampling.tools)) kinds.add('sampling.tools');
  }
  if (isObject(roots)) kinds.add('roots');
  return kinds;
}

/** A `ClientCapabilities` object that names what the given kinds need (for `-32021` `data.requiredCapabilities`). */
export function capabilitiesFor(kinds: Iterable<InputRequestKind>): ClientCapabilities {
  const caps: ClientCapabilities = {};
  for (const kind of kinds) {
    switch (kind) {
      case 'elicitation.form':
        caps.elicitation = { ...caps.elicitation, form: {} };
        break;
      case 'elicitation.url':
        caps.elicitation = { ...caps.elicitation, url: {} };
        break;
      case 'sampling':
        caps.sampling = { ...caps.sampling };
        break;
      case 'sampling.tools':
        caps.sampling = { ...caps.sampling, tools: {} };
        break;
      case 'roots':
        caps.roots = {};
        break;
    }
  }
  return caps;
}
