import t from 'tap';
import { openScratchPostgres } from '../../src/db/database.js';
import { eventStoreContract, inFlightAppendContract } from './contract.js';

const openDb = () => openScratchPostgres(undefined, 'factlog_eventstore');

eventStoreContract(t, openDb);
inFlightAppendContract(t, openDb);
