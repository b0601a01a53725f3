import t from 'tap';
import { openScratchPostgres } from '../../src/db/database.js';
import { eventStoreContract, inFlightAppendContract } from './contract.js';

const openDb = () => openScratchPostgres(undefined, 'factlog_eventstore');

// Other suites share the server: reads wait for this store's appends (see awaitingOwnAppends).
eventStoreContract(t, openDb);
inFlightAppendContract(t, openDb);
