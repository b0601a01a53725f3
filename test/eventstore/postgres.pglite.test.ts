import t from 'tap';
import { eventStoreContract, openMemoryPglite } from './contract.js';

eventStoreContract(t, openMemoryPglite);
