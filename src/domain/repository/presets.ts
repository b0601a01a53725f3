/** Repository presets the create-repository UI offers (spec, "Repository presets"). */
export interface RepositoryPreset {
  id: 'general' | 'scientific' | 'enterprise';
  label: string;
  description: string;
  providers: { search: string[]; resolution: string[] };
  /** `all` means the full ontology vocabulary. */
  contexts: string[];
  custom_contexts?: string[];
}

export const repositoryPresets: readonly RepositoryPreset[] = [
  {
    id: 'general',
    label: 'General',
    description: 'Web pages and documents on any topic, with the full ontology vocabulary.',
    providers: { search: ['lexical', 'vector'], resolution: ['http', 'upload'] },
    contexts: ['all'],
  },
  {
    id: 'scientific',
    label: 'Scientific',
    description: 'Papers resolved by DOI or URL, concepts in scientific contexts.',
    providers: { search: ['lexical', 'vector'], resolution: ['doi', 'http', 'upload'] },
    contexts: ['method', 'finding', 'organism', 'chemical', 'disease', 'dataset', 'person', 'organization'],
    custom_contexts: ['hypothesis'],
  },
  {
    id: 'enterprise',
    label: 'Enterprise',
    description: 'Internal documents uploaded by the organisation, concepts about its people, products and processes.',
    providers: { search: ['lexical', 'vector'], resolution: ['upload', 'http'] },
    contexts: ['person', 'organization', 'product', 'process', 'project', 'policy'],
    custom_contexts: ['customer'],
  },
];

export function findPreset(id: string): RepositoryPreset | undefined {
  return repositoryPresets.find((preset) => preset.id === id);
}
