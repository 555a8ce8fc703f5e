// The slots a turn-giving pass took for the turns it gave, handed to those turns' deliveries in the
// same isolate (most often the same pass's next round; hand-off.ts). A delivery that takes one skips what it
// would otherwise spend to find its slot and reserve its registration: the slot's publish (refused,
// the turn holds it), the slot's read and the registrations stream's read. Only the reservation's
// own publish is left, made on "no word yet on this id" (expected last sequence 0): that is the
// arbiter, as reserveAgain's publish is, so a second delivery, a redelivery in another isolate, or
// a reserveAgain racing it still gets one reservation between them. A hand-on is taken once, only
// within HANDED_MS, and only by the turn's message's first delivery: before that delivery nothing
// but the job's end frees the slot (its record says so, and the delivery's first write, at the
// revision it knew, then fails), while a redelivery may follow one elsewhere whose backend call
// failed and gave the slot back.
import { createHandOff, type HandOff } from "./hand-off.ts";

/** How long a slot taken for a turn may be handed to its delivery (its pass's next round, at once). */
export const HANDED_MS = 2_000;

/** A slot taken for a turn: where (admission's Placement), and its message's sequence. */
export interface HandedSlot<P> {
  /** The slot message's stream sequence: the registration word names it. */
  seq: number;
  place: P;
}

/** Slots handed to turns' deliveries: hand, and take once within HANDED_MS. */
export type TurnSlots<P> = Pick<HandOff<HandedSlot<P>>, "hand" | "take">;

export function createTurnSlots<P>(limit = 1_000): TurnSlots<P> {
  return createHandOff<HandedSlot<P>>(HANDED_MS, limit);
}
