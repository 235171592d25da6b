/** How the CLI names a Storage Queue (no SDK: imported by the descriptor, the adapter and the sender). */
export const CLI_PREFIX = 'azure-storage-queue:';
