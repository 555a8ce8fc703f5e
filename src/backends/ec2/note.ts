// What the ec2 driver keeps of an assignment between passes (its note, in the records bucket), read by its passes and its sweep.

/** What the driver keeps of an assignment between passes, in the records bucket. */
export interface InstanceNote {
  id: string;
  /** Rounds of attempts made so far (every attempt of a round had no room): part of the ClientToken. */
  round: number;
  /** The attempt asked for now (or last). */
  attempt: number;
  /**
   * The incarnation of the claim token it was made for: a request under another (its runner was
   * interrupted before the claim) ends this instance and asks for a new one, in a new round.
   */
  incarnation?: string;
  instanceId?: string;
  /** The key of the round's bootstrap (no secret): a pass whose token differs (a key rotation) settles the attempt in flight first. */
  boot?: string;
  /** Epoch ms the round's bootstrap was issued: a round is renewed before it could boot an instance with an expired one. */
  issuedAt?: number;
  /** Epoch ms the instance was asked for: its job's lifetime counts from here. */
  createdAt: number;
  checked?: boolean;
  ready?: boolean;
}
