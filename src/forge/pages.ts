// Paging through a forge's lists. A page may be shorter than asked for: Gitea and Forgejo cap it at
// the instance's [api].MAX_RESPONSE_ITEMS (default 50, often set lower; Forgejo's clamp is
// services/convert/utils.go:15-22 at v15.0.3), so a short page is no sign of the last one. A list
// is read until the forge says it is done: an empty page, or as many items as its total
// (Gitea's `total_count`, Forgejo's X-Total-Count).

/** One page as read: its items, and the list's total where the forge gives it. */
export interface Page<T> {
  items: T[];
  total?: number | undefined;
}

/** Reads pages 1 to `maxPages` in turn, handing each to `onPage`; true when the forge said the list was done. */
export async function forEachPage<T>(
  read: (page: number) => Promise<Page<T>>,
  maxPages: number,
  onPage: (items: T[]) => Promise<void> | void,
): Promise<boolean> {
  let seen = 0;
  for (let page = 1; page <= maxPages; page++) {
    const { items, total } = await read(page);
    if (items.length === 0) return true;
    await onPage(items);
    seen += items.length;
    if (total !== undefined && seen >= total) return true;
  }
  return false;
}
