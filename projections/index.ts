import type { Projection } from '../src/projection/types.js';
import { apiKeysProjection } from './apiKeys.js';
import { conceptsProjection } from './concepts.js';
import { factsProjection } from './facts.js';
import { hostHealthProjection } from './hostHealth.js';
import { investigationsProjection } from './investigations.js';
import { oauthClientsProjection } from './oauthClients.js';
import { reportsProjection } from './reports.js';
import { repositoriesProjection } from './repositories.js';
import { sourcesProjection } from './sources.js';
import { summariesProjection } from './summaries.js';
import { usersProjection } from './users.js';

/** Every read-model projection of the service, by name. */
export const readModelProjections: readonly Projection[] = [
  usersProjection,
  repositoriesProjection,
  sourcesProjection,
  factsProjection,
  conceptsProjection,
  hostHealthProjection,
  investigationsProjection,
  reportsProjection,
  summariesProjection,
  oauthClientsProjection,
  apiKeysProjection,
];
