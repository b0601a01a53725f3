import { apiKeyQueries } from '../read/apiKeys.js';
import { auditQueries } from '../read/audit.js';
import { conceptQueries } from '../read/concepts.js';
import { eventQueries } from '../read/events.js';
import { projectionQueries } from '../read/projections.js';
import { factQueries } from '../read/facts.js';
import { investigationQueries } from '../read/investigations.js';
import { memberQueries } from '../read/members.js';
import { repositoryQueries } from '../read/repositories.js';
import { reportQueries } from '../read/reports.js';
import { settingQueries } from '../read/settings.js';
import { sourceQueries } from '../read/sources.js';
import { summaryQueries } from '../read/summaries.js';
import { taskQueries } from '../read/tasks.js';
import { userQueries } from '../read/users.js';
import { apiKeyCommands } from './apiKeys.js';
import { conceptCommands } from './concepts.js';
import type { AppContext } from './appContext.js';
import { investigationCommands } from './investigations.js';
import { memberCommands } from './members.js';
import { projectionCommands } from './projections.js';
import { repositoryCommands } from './repositories.js';
import { reportCommands } from './reports.js';
import { settingCommands } from './settings.js';
import { sourceCommands } from './sources.js';
import { taskCommands } from './tasks.js';
import { userCommands } from './users.js';

/**
 * The application layer: every query (src/read) and command (src/app) a transport may call,
 * each as `(principal, input[, trace])`. REST routes, MCP tools, the CLI and the web app call
 * these same functions; none of them knows about HTTP.
 */
export function createApplication(context: AppContext) {
  return {
    repositories: { ...repositoryQueries(context), ...repositoryCommands(context) },
    settings: { ...settingQueries(context), ...settingCommands(context) },
    sources: { ...sourceQueries(context), ...sourceCommands(context) },
    facts: factQueries(context),
    reports: { ...reportQueries(context), ...reportCommands(context) },
    concepts: { ...conceptQueries(context), ...conceptCommands(context) },
    investigations: { ...investigationQueries(context), ...investigationCommands(context) },
    summaries: summaryQueries(context),
    tasks: { ...taskQueries(context), ...taskCommands(context) },
    events: eventQueries(context),
    users: { ...userQueries(context), ...userCommands(context) },
    members: { ...memberQueries(context), ...memberCommands(context) },
    apiKeys: { ...apiKeyQueries(context), ...apiKeyCommands(context) },
    audit: auditQueries(context),
    projections: { ...projectionQueries(context), ...projectionCommands(context) },
  };
}

export type Application = ReturnType<typeof createApplication>;
